"""vLLM's ``POST /tokenize`` and ``POST /detokenize`` over the served model's tokenizer.

- ``/tokenize`` ``{"model", "prompt", "add_special_tokens": true}`` (a completion's text), or
  ``{"model", "messages", "add_generation_prompt": true, "add_special_tokens": false, "tools"}`` (a
  chat, through the chat template, as ``/v1/chat/completions`` renders it), each with
  ``"return_token_strs": false``: ``{"count", "max_model_len", "tokens", "token_strs"}``
  (``token_strs`` null unless asked for).
- ``/detokenize`` ``{"model", "tokens"}`` (ids of the vocabulary): ``{"prompt"}``, special tokens kept.

``model`` may be left out (vLLM's rule); any other field than these is refused (400 naming it), as
everywhere on this server. Tokenizing runs off the event loop, in the threads that tokenize
prompts (:class:`~.prompt_tokens.PromptTokens`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import GenerationError
from .api import ApiError, parse_messages
from .fields import short
from .formats import check_tools

__all__ = ["Detokenize", "Tokenize", "parse_detokenize", "parse_tokenize"]

_TEXT = frozenset({"model", "prompt", "add_special_tokens", "return_token_strs"})
_CHAT = frozenset({"model", "messages", "add_generation_prompt", "add_special_tokens", "return_token_strs", "tools"})
_DETOKENIZE = frozenset({"model", "tokens"})


@dataclass(frozen=True)
class Tokenize:
    """What ``/tokenize`` was asked: a text or a chat (``messages``), and how."""

    model: str | None
    prompt: str | None
    messages: list[dict[str, Any]] | None
    tools: list[Any] | None
    add_special_tokens: bool
    add_generation_prompt: bool
    return_token_strs: bool

    def ids(self, tokenizer: Any) -> list[int]:
        """Its token ids, as the generation endpoints make them.

        Raises:
            ApiError: 400 naming the field the tokenizer or the chat template refuses.
        """
        try:
            if self.messages is None:
                assert self.prompt is not None
                return tokenizer.encode(self.prompt, add_special_tokens=self.add_special_tokens)
            text = tokenizer.apply_chat_template(
                self.messages, add_generation_prompt=self.add_generation_prompt, tools=self.tools
            )
            return tokenizer.encode(text, add_special_tokens=self.add_special_tokens)
        except GenerationError as exc:
            raise ApiError(str(exc), param="prompt" if self.messages is None else "messages") from None

    def answer(self, tokenizer: Any, max_model_len: int) -> dict[str, Any]:
        """vLLM's answer: ``count``, ``max_model_len``, ``tokens`` and ``token_strs`` (null unless
        asked for).

        Raises:
            ApiError: as :meth:`ids`.
        """
        ids = self.ids(tokenizer)
        strs = [tokenizer.backend.id_to_token(i) for i in ids] if self.return_token_strs else None
        return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": strs}


@dataclass(frozen=True)
class Detokenize:
    """What ``/detokenize`` was asked."""

    model: str | None
    tokens: list[int]


def parse_tokenize(body: Any) -> Tokenize:
    """A ``/tokenize`` body.

    Raises:
        ApiError: 400 naming the field: not a JSON object, neither or both of ``prompt`` and
            ``messages``, a value of the wrong type, a field this endpoint does not take.
    """
    body = _object(body)
    chat = body.get("messages") is not None
    if chat == (body.get("prompt") is not None):
        raise ApiError("give either prompt (a text) or messages (a chat)", param="prompt")
    _only(body, _CHAT if chat else _TEXT)
    prompt = body.get("prompt")
    if not chat and not isinstance(prompt, str):
        raise ApiError(f"prompt must be a string, got {short(prompt)}", param="prompt")
    tools = body.get("tools")
    if tools is not None:
        try:
            check_tools(tools)
        except GenerationError as exc:
            raise ApiError(str(exc), param=exc.field or "tools") from None
    return Tokenize(
        _model(body),
        None if chat else prompt,
        parse_messages(body["messages"]) if chat else None,
        tools,
        _flag(body, "add_special_tokens", not chat),
        _flag(body, "add_generation_prompt", True),
        _flag(body, "return_token_strs", False),
    )


def parse_detokenize(body: Any, vocab_size: int) -> Detokenize:
    """A ``/detokenize`` body (``tokens``: ids below ``vocab_size``).

    Raises:
        ApiError: 400 naming the field.
    """
    body = _object(body)
    _only(body, _DETOKENIZE)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise ApiError(f"tokens must be a list of token ids, got {short(tokens)}", param="tokens")
    wrong = next((t for t in tokens if not 0 <= t < vocab_size), None)
    if wrong is not None:
        raise ApiError(f"tokens: {wrong} is not a token id of this model (0 to {vocab_size - 1})", param="tokens")
    return Detokenize(_model(body), tokens)


def _object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise ApiError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def _only(body: Mapping[str, Any], fields: frozenset[str]) -> None:
    unknown = [k for k, v in body.items() if v is not None and k not in fields]
    if unknown:
        names = ", ".join(short(k) for k in unknown[:5])
        raise ApiError(f"field(s) not supported here: {names}", param=str(unknown[0])[:64])


def _model(body: Mapping[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(f"model must be a string, got {short(model)}", param="model")
    return model


def _flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(f"{name} must be true or false, got {short(value)}", param=name)
    return value

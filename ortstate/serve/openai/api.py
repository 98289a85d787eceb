"""The OpenAI API's requests, as ``ortstate serve`` takes them for an LLM folder (its responses:
:mod:`.responses`).

A request body is checked whole before anything runs: a field of the wrong type or out of range,
a feature this server does not have (``echo``, ``tool_choice`` ``"auto"``, ...) is an
:class:`ApiError` naming the field, answered in OpenAI's error body
``{"error": {"message", "type", "param", "code"}}`` with its HTTP status. Every field is applied or
refused: the sampling fields are OpenAI's and vLLM's (``top_k``, ``min_p``, ``repetition_penalty``,
``presence_penalty``, ``frequency_penalty``, ``logit_bias``, ``ignore_eos``, ``min_tokens``, ``n``,
``stop_token_ids``, with vLLM's meaning: see :class:`~ortstate.generate.SearchOptions`); the
fields in :data:`~.fields.NO_EFFECT` cannot change the output and are accepted as they come;
any other field (vLLM's ``use_beam_search``, ``bad_words``, ``guided_json``, ..., or a typo) is a
400 naming it (:mod:`.fields`).

``response_format`` (both endpoints) and ``tools`` with ``tool_choice`` (chat) constrain the answer
to a JSON schema (:mod:`.formats`).

One ortstate extension, vLLM's: ``"return_token_ids": true`` adds ``token_ids`` (the generated
token ids) and ``prompt_token_ids`` to a choice (a streamed chunk: the ids of its text).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import GenerationError, ServeError
from .fields import SEARCH_FIELDS, short, unsupported
from .formats import Constraint, constraint
from .messages import chat_messages

__all__ = [
    "ApiError",
    "ChatRequest",
    "CompletionRequest",
    "Sampling",
    "parse_chat",
    "parse_completion",
    "parse_messages",
]

MAX_STOP = 4  # stop strings per request, as OpenAI
# characters of a stop string: the text held back and searched at every token is as long as the
# longest one, so its length times the tokens is the cost (a 60,000-character one over 32,000
# tokens took 1.3 s of the event loop's CPU)
MAX_STOP_CHARS = 1024


class ApiError(ServeError):
    """A request answered with OpenAI's error body.

    Attributes:
        code: the HTTP status.
        kind: the body's ``type``; ``param`` the field at fault; ``error_code`` the body's ``code``.
    """

    def __init__(
        self,
        message: str,
        status: int = 400,
        *,
        param: str | None = None,
        kind: str = "invalid_request_error",
        error_code: str | None = None,
    ) -> None:
        super().__init__(message, status)
        self.param = param
        self.kind = kind
        self.error_code = error_code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.error_code}}


@dataclass(frozen=True)
class Sampling:
    """What a request asks of the generation (checked).

    Attributes:
        max_tokens: new tokens at most (None: up to the context length).
        temperature: 0 is greedy; above, sampling at that temperature.
        stop: texts ending the completion (left out of it).
    """

    model: str
    max_tokens: int | None
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    token_ids: bool
    logprobs: int | None = None  # asked for: the top tokens per token (None: no logprobs)
    # vLLM's and OpenAI's sampling fields, as given (None: not given; checked by SearchOptions)
    extra: tuple[tuple[str, Any], ...] = ()
    ignore_eos: bool = False
    n: int = 1
    constraint: Constraint = Constraint()  # response_format, or a forced tool

    def search(self, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """The :class:`~ortstate.generate.SearchOptions` keywords, as vLLM turns a request into its
        ``SamplingParams``: greedy at temperature 0 (``top_k``, ``top_p``, ``min_p`` then ignored),
        else sampling; ``top_k`` off unless the request or ``generation_config.json`` sets it; the
        penalties, ``logit_bias``, ``min_tokens``, ``n`` and ``stop_token_ids`` as given; the
        constraint's ``json_schema``."""
        search: dict[str, Any] = {k: v for k, v in self.extra if v is not None}
        if self.constraint.schema is not None:
            search["json_schema"] = self.constraint.schema
        if self.temperature == 0:
            for key in ("top_k", "min_p"):
                search.pop(key, None)
            return search
        search.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        if "top_k" not in defaults and "top_k" not in search:
            search["top_k"] = 0
        if self.seed is not None:
            search["seed"] = self.seed
        return search


@dataclass(frozen=True)
class CompletionRequest:
    """``POST /v1/completions``: a text prompt or token ids."""

    prompt: str | list[int]
    sampling: Sampling


@dataclass(frozen=True)
class ChatRequest:
    """``POST /v1/chat/completions``: messages of text (``role``, ``content``)."""

    messages: list[dict[str, Any]]
    sampling: Sampling


# -- parsing ----------------------------------------------------------------------------------------
def _number(body: Mapping[str, Any], key: str, default: float, lo: float, hi: float, *, open_lo: bool = False) -> float:
    value = body.get(key)
    if value is None:
        return default
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value > hi or value < lo or (open_lo and value == lo):
        bound = f"{'>' if open_lo else '>='} {lo:g} and <= {hi:g}"
        raise ApiError(f"{key} must be a number {bound}, got {short(value)}", param=key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str, lo: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ApiError(f"{key} must be an integer >= {lo}, got {short(value)}", param=key)
    return value


def _logprobs(body: Mapping[str, Any], chat: bool) -> int | None:
    """Top tokens wanted beside each token's logprob (None: no logprobs; chat: 0-20, completion: 0-5)."""
    asked, top = body.get("logprobs"), body.get("top_logprobs")
    key, value, most = ("top_logprobs", top, 20) if chat else ("logprobs", asked, 5)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most):
        raise ApiError(f"{key} must be an integer from 0 to {most}, got {short(value)}", param=key)
    if not chat and top is not None:
        raise ApiError("top_logprobs is a chat field: a completion takes logprobs (0 to 5)", param="top_logprobs")
    if chat:
        _flag(body, "logprobs")
    if chat and top is not None and not asked:
        raise ApiError("top_logprobs needs logprobs set to true", param="top_logprobs")
    return ((top or 0) if asked else None) if chat else asked


def _sampling(body: Mapping[str, Any], max_keys: tuple[str, ...], chat: bool) -> Sampling:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError("model: a model id (a string) is required", param="model")
    given = {key: value for key in max_keys if (value := _integer(body, key, 1)) is not None}
    if len(set(given.values())) > 1:  # one would be ignored (vLLM takes the first)
        raise ApiError(f"{' and '.join(given)} differ: send one", param=max_keys[-1])
    max_tokens = next(iter(given.values()), None)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ApiError(f"seed must be an integer >= 0, got {short(seed)}", param="seed")
    stop = body.get("stop")
    stops = () if stop is None else (stop,) if isinstance(stop, str) else stop
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(f"stop must be a non-empty string or a list of them, got {short(stop)}", param="stop")
    if len(stops) > MAX_STOP:
        raise ApiError(f"stop takes at most {MAX_STOP} strings, got {len(stops)}", param="stop")
    longest = max(map(len, stops), default=0)
    if longest > MAX_STOP_CHARS:
        raise ApiError(f"stop strings are {MAX_STOP_CHARS} characters at most, got one of {longest}", param="stop")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError("stream_options is only allowed when stream is true", param="stream_options")
    include_usage = _stream_options(options)
    return Sampling(
        model=model,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, open_lo=True),
        seed=seed,
        stop=tuple(stops),
        stream=stream,
        include_usage=include_usage,
        token_ids=_flag(body, "return_token_ids"),
        logprobs=_logprobs(body, chat),
        extra=tuple((key, body.get(key)) for key in SEARCH_FIELDS),
        ignore_eos=_flag(body, "ignore_eos"),
        n=_integer(body, "n", 1) or 1,
        constraint=_constraint(body, chat),
    )


def _flag(body: Mapping[str, Any], key: str) -> bool:
    """A field that is true or false (absent: false); 1 and 0 are refused, as any other value."""
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise ApiError(f"{key} must be true or false, got {short(value)}", param=key)
    return bool(value)


def _stream_options(options: Any) -> bool:
    """Whether ``stream_options`` asks for the usage chunk; any other option (vLLM's
    ``continuous_usage_stats``) is refused, naming it."""
    if options is None:
        return False
    if not isinstance(options, Mapping):
        raise ApiError(
            f"stream_options must be {{'include_usage': bool}}, got {short(options)}", param="stream_options"
        )
    extra = next((k for k, v in options.items() if k != "include_usage" and v is not None), None)
    if extra is not None:
        raise ApiError(
            f"stream_options: {short(extra)} is not supported (only include_usage)",
            param=f"stream_options.{str(extra)[:64]}",
        )
    value = options.get("include_usage")
    if value is not None and not isinstance(value, bool):
        raise ApiError(
            f"stream_options.include_usage must be true or false, got {short(value)}",
            param="stream_options.include_usage",
        )
    return bool(value)


def _constraint(body: Mapping[str, Any], chat: bool) -> Constraint:
    try:
        return constraint(body, chat)
    except GenerationError as exc:
        raise ApiError(str(exc), param=exc.field) from None


def _object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise ApiError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def parse_completion(body: Any) -> CompletionRequest:
    """A ``/v1/completions`` body: ``prompt`` is a string, a list of token ids, or a list of one of either.

    Raises:
        ApiError: the body is not what the API takes, or asks for what this server does not do.
    """
    body = _object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    ids = isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    if not (isinstance(prompt, str) or ids):
        many = isinstance(prompt, list) and all(isinstance(p, (str, list)) for p in prompt)
        why = "one prompt per request" if many and prompt else "a string or a list of token ids"
        raise ApiError(f"prompt must be {why}, got {short(prompt)}", param="prompt")
    if not prompt:
        raise ApiError("prompt is empty", param="prompt")
    _refuse_unsupported(body, frozenset({"prompt", "max_tokens"}))
    return CompletionRequest(prompt, _sampling(body, ("max_tokens",), chat=False))


def parse_chat(body: Any) -> ChatRequest:
    """A ``/v1/chat/completions`` body: ``messages`` as :mod:`.messages` takes them (each field of a
    message applied or refused), its own fields (``max_completion_tokens``, ``top_logprobs``,
    ``tools``, ``tool_choice``) and both endpoints'.

    Raises:
        ApiError: as :func:`parse_completion`.
    """
    body = _object(body)
    out = parse_messages(body.get("messages"))
    own = frozenset({"messages", "max_completion_tokens", "max_tokens", "top_logprobs", "tools", "tool_choice"})
    _refuse_unsupported(body, own)
    return ChatRequest(out, _sampling(body, ("max_completion_tokens", "max_tokens"), chat=True))


def parse_messages(messages: Any) -> list[dict[str, Any]]:
    """A chat's ``messages`` as its template takes them (:func:`~.messages.chat_messages`).

    Raises:
        ApiError: 400 naming the message at fault.
    """
    try:
        return chat_messages(messages)
    except GenerationError as exc:
        raise ApiError(str(exc), param=exc.field) from None


def _refuse_unsupported(body: Mapping[str, Any], own: frozenset[str]) -> None:
    problem = unsupported(body, own)
    if problem is not None:
        raise ApiError(problem[0], param=problem[1])

"""The OpenAI API's response shapes, as ``ortstate serve`` answers for an LLM folder: a whole
response of one or ``n`` choices, a streamed chunk of one choice, the usage. A forced tool's answer
is its call: ``message.tool_calls`` (``content`` null), streamed as ``delta.tool_calls`` whose first
names the call (``id``, ``type``, ``function.name``) and each carries a piece of its ``arguments``,
as OpenAI and vLLM stream them."""

from __future__ import annotations

import secrets
import time
from typing import Any

__all__ = ["Call", "choice", "chunk", "completion", "new_call_id", "new_id", "response", "usage"]

Call = tuple[str, str]  # a tool call's (id, function name)


def new_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{secrets.token_hex(12)}"


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def usage(prompt_tokens: int, completion_tokens: int, cached: int = 0) -> dict[str, Any]:
    """OpenAI's usage; ``cached``: prompt tokens not fed, a stream held them already (a
    conversation's, the prefix cache's: vLLM's ``cached_tokens``)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _choice(
    chat: bool,
    text: str,
    finish: str | None,
    delta: bool,
    role: bool = False,
    index: int = 0,
    call: Call | None = None,
    first: bool = False,
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index}
    if not chat:
        choice["text"] = text
    elif delta:  # the finish chunk's delta is empty
        choice["delta"] = {} if finish else _delta(text, None if role else call, first)
        if role and not finish:
            choice["delta"] = {"role": "assistant", **choice["delta"]}
    elif call is not None:
        choice["message"] = {"role": "assistant", "content": None, "tool_calls": [_call(call, text)]}
    else:
        choice["message"] = {"role": "assistant", "content": text}
    choice["logprobs"] = None
    choice["finish_reason"] = finish
    return choice


def _call(call: Call, arguments: str) -> dict[str, Any]:
    return {"id": call[0], "type": "function", "function": {"name": call[1], "arguments": arguments}}


def _delta(text: str, call: Call | None, first: bool) -> dict[str, Any]:
    """A piece of the answer: its text, or (a tool's) of its call's arguments, the first naming the call."""
    if call is None:
        return {"content": text}
    named = {"index": 0, **_call(call, text)} if first else {"index": 0, "function": {"arguments": text}}
    return {"tool_calls": [named]}


def choice(
    chat: bool,
    index: int,
    text: str,
    finish: str,
    ids: tuple[list[int], list[int]] | None,
    logprobs: Any = None,
    call: Call | None = None,
) -> dict[str, Any]:
    """One choice of a whole response; ``ids``: (prompt, generated) token ids, ``logprobs``: the
    choice's, when asked for; ``call``: the answer is that tool call's arguments."""
    out = _choice(chat, text, finish, delta=False, index=index, call=call)
    out["logprobs"] = logprobs
    if ids is not None:
        out["prompt_token_ids"], out["token_ids"] = ids
    return out


def completion(
    rid: str,
    model: str,
    chat: bool,
    text: str,
    finish: str,
    used: dict[str, Any],
    ids: tuple[list[int], list[int]] | None,
    logprobs: Any = None,
    call: Call | None = None,
) -> dict[str, Any]:
    """A whole response of one choice (see :func:`choice`)."""
    return response(rid, model, chat, [choice(chat, 0, text, finish, ids, logprobs, call)], used)


def response(rid: str, model: str, chat: bool, choices: list[dict[str, Any]], used: dict[str, Any]) -> dict[str, Any]:
    """A whole response of ``choices`` (:func:`choice`)."""
    return {
        "id": rid,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": used,
    }


def chunk(
    rid: str,
    model: str,
    chat: bool,
    text: str = "",
    finish: str | None = None,
    *,
    role: bool = False,
    ids: list[int] | None = None,
    used: dict[str, Any] | None = None,
    with_usage: bool = False,
    logprobs: Any = None,
    index: int = 0,
    call: Call | None = None,
    first: bool = False,
) -> dict[str, Any]:
    """A streamed chunk of choice ``index``: a piece of text (``role``: the first of a chat; ``call``:
    of that tool call's arguments, ``first``: the piece naming it), the finish, or (``used`` given)
    the usage chunk with no choice; ``with_usage``: the others carry ``"usage": null``."""
    body: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [],
    }
    if used is None:
        piece = _choice(chat, text, finish, delta=True, role=role, index=index, call=call, first=first)
        piece["logprobs"] = logprobs
        if ids is not None:
            piece["token_ids"] = ids
        body["choices"] = [piece]
    if used is not None or with_usage:
        body["usage"] = used
    return body

"""A chat's ``messages`` as ``/v1/chat/completions`` and ``/tokenize`` take them, for the chat
template: each an object with a ``role`` (``developer`` read as ``system``, OpenAI's newer name for
it) and a text ``content`` (a string, or a list of ``{"type": "text", "text": ...}`` parts, joined;
none on an assistant's turn with ``tool_calls``), a ``name`` (given to the template, as vLLM gives
it), and what tool calls carry (:func:`~.formats.message_calls`). Any other field of a message or
of a part (``refusal``, an ``image_url`` part, a typo) is refused naming it: nothing a client sends
is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import GenerationError
from .fields import short
from .formats import message_calls

__all__ = ["chat_messages"]


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """A chat's ``messages`` as its template takes them (see the module).

    Raises:
        GenerationError: naming the message (its ``field``) at fault.
    """
    if not isinstance(messages, list) or not messages:
        raise GenerationError(f"messages must be a non-empty list, got {short(messages)}", field="messages")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise GenerationError(f"{where} must be an object with a role, got {short(message)}", field=where)
        calls = message_calls(message, where)
        content = _content(message.get("content"), where)
        if content is None and "tool_calls" in calls:
            content = ""  # an assistant's turn that only called tools
        if not isinstance(content, str):
            raise GenerationError(f"{where}.content must be text, got {short(content)}", field=f"{where}.content")
        role = "system" if message["role"] == "developer" else message["role"]  # OpenAI's newer name for it
        out.append({"role": role, "content": content, **calls, **_name(message, where)})
    return out


_MESSAGE = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})  # what a message may carry


def _name(message: Mapping[str, Any], where: str) -> dict[str, str]:
    """A message's ``name`` (the template is given it, as vLLM gives it); a field a message may
    not carry (a typo, ``refusal``, ``audio``, ...) is refused naming it."""
    extra = next((k for k, v in message.items() if k not in _MESSAGE and v is not None), None)
    if extra is not None:
        raise GenerationError(
            f"{where}: field {short(extra)} is not supported (a message takes {', '.join(sorted(_MESSAGE))})",
            field=f"{where}.{str(extra)[:64]}",
        )
    name = message.get("name")
    if name is None:
        return {}
    if not isinstance(name, str):
        raise GenerationError(f"{where}.name must be a string, got {short(name)}", field=f"{where}.name")
    return {"name": name}


def _content(content: Any, where: str) -> Any:
    """A message's content, its text parts (``{"type": "text", "text": ...}``, nothing else) joined."""
    if not isinstance(content, list):
        return content
    for j, part in enumerate(content):
        ok = isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
        if not ok or any(k not in ("type", "text") and v is not None for k, v in part.items()):
            raise GenerationError(
                f'{where}.content[{j}]: only text parts ({{"type": "text", "text": ...}}) are supported, '
                f"got {short(part)}",
                field=f"{where}.content",
            )
    return "".join(p["text"] for p in content)

"""What constrains an answer behind the OpenAI API: ``response_format`` (both endpoints, as vLLM),
``tools`` and ``tool_choice`` (chat), checked whole and made into one JSON schema (the text
:func:`~ortstate.generate.structured.schema_text` makes) and, for a forced tool, the function whose
arguments the answer is.

- ``response_format``: ``{"type": "text"}`` (nothing), ``{"type": "json_object"}`` (any JSON
  object), ``{"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}``
  (the answer valid against ``schema``; ``strict`` false is enforced too, as vLLM does).
- ``tool_choice``: ``"none"`` (plain text), ``{"type": "function", "function": {"name": N}}`` or
  ``"required"`` with one tool (the answer is N's arguments, valid against its ``parameters``).
  ``"auto"`` (the default when ``tools`` are given) and ``"required"`` among several tools would need
  the model's own tool-call format parsed from free text: refused.

Every refusal is a :class:`~ortstate.errors.GenerationError` of one line whose ``field`` names the
request's field (answered 400 naming it); a schema over a bound is
refused here, in time linear in its size (what llguidance refuses is found when it compiles, off
the event loop: :mod:`.service`).

A conversation that goes on after a tool call sends it back: an assistant message's ``tool_calls``
and the ``tool`` message's ``tool_call_id`` reach the chat template (:func:`message_calls`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import GenerationError
from ...generate.structured import JSON_OBJECT, schema_text
from .fields import short

__all__ = ["Constraint", "MAX_TOOLS", "check_tools", "constraint", "message_calls", "schema_error"]

MAX_TOOLS = 128  # as OpenAI
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for a function's name
NO_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class Constraint:
    """A request's constraint: ``schema`` (compact JSON schema text, None: free text), the field it
    came from (``param``: what its errors name), the forced function (``tool``, None: none) and
    the tools as the chat template is given them."""

    schema: str | None = None
    param: str = "response_format.json_schema.schema"
    tool: str | None = None
    tools: tuple[Mapping[str, Any], ...] = ()


def schema_error(exc: GenerationError, param: str) -> GenerationError:
    """A ``json_schema`` error as a 400 naming ``param`` (the request's field) in its text and ``param``."""
    text = str(exc)
    if text.startswith("json_schema"):
        text = param + text[len("json_schema") :]
    return GenerationError(text, field=param)


def _schema(value: Any, param: str) -> str:
    try:
        return schema_text(value)
    except GenerationError as exc:
        raise schema_error(exc, param) from None


def _keys(value: Any, allowed: frozenset[str], param: str, shape: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise GenerationError(f"{param} must be {shape}, got {short(value)}", field=param)
    extra = [k for k, v in value.items() if k not in allowed and v is not None]
    if extra:
        raise GenerationError(
            f"{param}: field {short(extra[0])} is not supported (allowed: {', '.join(sorted(allowed))})",
            field=f"{param}.{str(extra[0])[:64]}",
        )
    return value


def _typed(value: Mapping[str, Any], key: str, kind: type, param: str, required: bool = False) -> Any:
    """``value[key]``, of type ``kind`` (absent: None, unless ``required``)."""
    got = value.get(key)
    if got is None and not required:
        return None
    if not isinstance(got, kind) or (isinstance(got, bool) and kind is not bool):
        raise GenerationError(f"{param}.{key} must be a {kind.__name__}, got {short(got)}", field=f"{param}.{key}")
    return got


def response_format(value: Any) -> str | None:
    """``response_format``'s schema text (None: free text)."""
    if value is None:
        return None
    value = _keys(
        value,
        frozenset({"type", "json_schema"}),
        "response_format",
        '{"type": "text" | "json_object" | "json_schema", ...}',
    )
    kind = value.get("type")
    if kind == "text" or kind == "json_object":
        if value.get("json_schema") is not None:
            raise GenerationError(
                f"response_format.json_schema goes with type 'json_schema', not {kind!r}",
                field="response_format.json_schema",
            )
        return None if kind == "text" else schema_text(JSON_OBJECT)
    if kind != "json_schema":
        raise GenerationError(
            f"response_format.type must be 'text', 'json_object' or 'json_schema', got {short(kind)}",
            field="response_format.type",
        )
    param = "response_format.json_schema"
    spec = _keys(
        value.get("json_schema"),
        frozenset({"name", "schema", "strict", "description"}),
        param,
        '{"name", "schema", "strict", "description"}',
    )
    _typed(spec, "name", str, param, required=True)
    _typed(spec, "description", str, param)
    _typed(spec, "strict", bool, param)
    if spec.get("schema") is None:
        raise GenerationError(f"{param}.schema is required (a JSON schema)", field=f"{param}.schema")
    return _schema(spec["schema"], f"{param}.schema")


def check_tools(value: Any) -> None:
    """``tools`` as the chat endpoint takes them (each a function, its ``parameters`` a schema).

    Raises:
        GenerationError: naming the field at fault.
    """
    _tools(value)


def _tools(value: Any) -> dict[str, str]:
    """Each tool's name and its arguments' schema text, checked."""
    if value is None:
        return {}
    if not isinstance(value, list):
        raise GenerationError(f"tools must be a list of functions, got {short(value)}", field="tools")
    if len(value) > MAX_TOOLS:
        raise GenerationError(f"tools takes at most {MAX_TOOLS} functions, got {len(value)}", field="tools")
    out: dict[str, str] = {}
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        tool = _keys(tool, frozenset({"type", "function"}), where, '{"type": "function", "function": {...}}')
        if tool.get("type") != "function":
            raise GenerationError(
                f"{where}.type must be 'function', got {short(tool.get('type'))}", field=f"{where}.type"
            )
        where += ".function"
        function = _keys(
            tool.get("function"),
            frozenset({"name", "description", "parameters", "strict"}),
            where,
            '{"name", "description", "parameters", "strict"}',
        )
        name = _typed(function, "name", str, where, required=True)
        if not _NAME.fullmatch(name):
            raise GenerationError(
                f"{where}.name must be 1 to 64 of a-z, A-Z, 0-9, _ and -, got {short(name)}", field=f"{where}.name"
            )
        if name in out:
            raise GenerationError(f"{where}.name: a second function named {name!r}", field=f"{where}.name")
        _typed(function, "description", str, where)
        _typed(function, "strict", bool, where)
        parameters = function.get("parameters")
        out[name] = _schema(NO_PARAMETERS if parameters is None else parameters, f"{where}.parameters")
    return out


def _chosen(choice: Any, tools: dict[str, str]) -> str | None:
    """The function ``tool_choice`` forces (None: ``"none"``, or no tools and no choice)."""
    if choice is None and not tools or choice == "none":
        return None
    if choice is None or choice == "auto":
        raise GenerationError(
            "tool_choice 'auto' (the default with tools) is not supported: the answer would be free text "
            'in the model\'s own tool-call format; force one function ({"type": "function", "function": '
            "{\"name\": ...}}) or send tool_choice 'none'",
            field="tool_choice",
        )
    if not tools:
        raise GenerationError("tool_choice names a function, but tools lists none", field="tool_choice")
    if choice == "required":
        if len(tools) != 1:
            raise GenerationError(
                f"tool_choice 'required' is supported with one tool (it is that tool), got {len(tools)}: "
                "force one function by name",
                field="tool_choice",
            )
        return next(iter(tools))
    choice = _keys(
        choice,
        frozenset({"type", "function"}),
        "tool_choice",
        '\'none\', \'required\' or {"type": "function", "function": {"name": ...}}',
    )
    if choice.get("type") != "function":
        raise GenerationError(
            f"tool_choice.type must be 'function', got {short(choice.get('type'))}", field="tool_choice.type"
        )
    function = _keys(choice.get("function"), frozenset({"name"}), "tool_choice.function", '{"name": ...}')
    name = _typed(function, "name", str, "tool_choice.function", required=True)
    if name not in tools:
        raise GenerationError(
            f"tool_choice.function.name {short(name)} is not one of tools' functions", field="tool_choice.function.name"
        )
    return name


def constraint(body: Mapping[str, Any], chat: bool) -> Constraint:
    """The constraint of a request ``body`` (``chat``: ``tools`` and ``tool_choice`` taken too).

    Raises:
        ApiError: 400 naming the field at fault.
    """
    schema = response_format(body.get("response_format"))
    if not chat:
        return Constraint(schema)
    tools = _tools(body.get("tools"))
    tool = _chosen(body.get("tool_choice"), tools)
    listed = tuple(body.get("tools") or ())
    if tool is None:
        return Constraint(schema, tools=listed)
    if schema is not None:
        raise GenerationError(
            "response_format and a forced tool_choice both constrain the answer: send one", field="response_format"
        )
    index = list(tools).index(tool)
    return Constraint(tools[tool], f"tools[{index}].function.parameters", tool, listed)


def message_calls(message: Mapping[str, Any], where: str) -> dict[str, Any]:
    """What a chat ``message`` carries of tool calls, for the chat template: an assistant's
    ``tool_calls`` (each ``function.arguments`` parsed, as vLLM gives them to a template: templates
    write them as objects), a tool result's ``tool_call_id``."""
    out: dict[str, Any] = {}
    calls = message.get("tool_calls")
    if calls is not None:
        if message.get("role") != "assistant" or not isinstance(calls, list):
            raise GenerationError(
                f"{where}.tool_calls must be a list, on an assistant message", field=f"{where}.tool_calls"
            )
        out["tool_calls"] = [_sent_call(call, f"{where}.tool_calls[{j}]") for j, call in enumerate(calls)]
    if message.get("tool_call_id") is not None:
        out["tool_call_id"] = _typed(message, "tool_call_id", str, where)
    return out


def _sent_call(call: Any, where: str) -> dict[str, Any]:
    shape = '{"id", "type": "function", "function": {"name", "arguments"}}'
    call = _keys(call, frozenset({"id", "type", "function"}), where, shape)
    if call.get("type") not in (None, "function"):
        raise GenerationError(f"{where}.type must be 'function', got {short(call.get('type'))}", field=f"{where}.type")
    function = _keys(
        call.get("function"), frozenset({"name", "arguments"}), f"{where}.function", '{"name", "arguments"}'
    )
    name = _typed(function, "name", str, f"{where}.function", required=True)
    text = _typed(function, "arguments", str, f"{where}.function", required=True)
    try:
        arguments = json.loads(text)
    except (ValueError, RecursionError):
        raise GenerationError(
            f"{where}.function.arguments is not JSON text", field=f"{where}.function.arguments"
        ) from None
    call_id = _typed(call, "id", str, where)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

"""A ``json_schema`` option as given (a dict, or its JSON text) checked against the bounds below and
made into the one text every later step keys on (the compiled-grammar cache, the engine).

The bounds are checked before any engine sees the schema, in time linear in its size; what a
schema costs once compiled (a pattern's automaton, a grammar's size) is bounded by the engine's
own limits (:mod:`.grammar`). A schema over a bound is refused with one line naming the bound:

- its JSON text at most :data:`MAX_SCHEMA_CHARS` characters (compact, as re-serialized here);
- nested at most :data:`MAX_DEPTH` levels of objects and arrays (the document, not only ``properties``);
- at most :data:`MAX_ENUM_VALUES` values in all its ``enum`` lists together;
- each ``pattern`` (and ``patternProperties`` key) at most :data:`MAX_PATTERN_CHARS` characters.

OpenAI's structured outputs allow 5 levels of nesting, 1,000 enum values and 15,000 characters of
names and values: these bounds are wider, so what OpenAI takes is taken here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NoReturn

from ...errors import GenerationError

__all__ = [
    "JSON_OBJECT",
    "MAX_DEPTH",
    "MAX_ENUM_VALUES",
    "MAX_PATTERN_CHARS",
    "MAX_SCHEMA_CHARS",
    "pattern_bytes",
    "schema_text",
]

MAX_SCHEMA_CHARS = 100_000
MAX_DEPTH = 64
MAX_ENUM_VALUES = 2_000
MAX_PATTERN_CHARS = 1_000
JSON_OBJECT: Mapping[str, Any] = {"type": "object"}  # OpenAI's {"type": "json_object"}: any JSON object


def _fail(what: str) -> NoReturn:
    raise GenerationError(f"json_schema {what}", field="json_schema")


def _parse(value: str) -> Any:
    if len(value) > MAX_SCHEMA_CHARS * 4:  # whitespace aside, a text this long is over the bound
        _fail(f"is {len(value)} characters long, more than {MAX_SCHEMA_CHARS} allowed")
    try:
        return json.loads(value, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        _fail(f"is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except RecursionError:
        _fail(f"nests deeper than {MAX_DEPTH} levels")


def _no_constant(name: str) -> NoReturn:
    _fail(f"holds {name}, which is not JSON")


def _walk(schema: Any) -> None:
    """Depth, enum values and pattern lengths, iteratively (no recursion a deep document could exhaust)."""
    enum_values = 0
    stack: list[tuple[Any, int, str | None]] = [(schema, 1, None)]
    while stack:
        node, depth, key = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            _fail("holds a number that is not finite")
        if not isinstance(node, (Mapping, list)):
            continue
        if depth > MAX_DEPTH:
            _fail(f"nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, list):
            if key == "enum":
                enum_values += len(node)
                if enum_values > MAX_ENUM_VALUES:
                    _fail(f"lists more than {MAX_ENUM_VALUES} enum values in all")
            stack.extend((item, depth + 1, None) for item in node)
            continue
        for name, value in node.items():
            if name == "pattern" and isinstance(value, str) and len(value) > MAX_PATTERN_CHARS:
                _fail(f"has a pattern of {len(value)} characters, more than {MAX_PATTERN_CHARS} allowed")
            if name == "patternProperties" and isinstance(value, Mapping):
                long = [p for p in value if len(p) > MAX_PATTERN_CHARS]
                if long:
                    _fail(f"has a patternProperties key of {len(long[0])} characters, more than {MAX_PATTERN_CHARS}")
            stack.append((value, depth + 1, name))


def schema_text(value: Any) -> str:
    """The schema as compact JSON text (its keys in their order: properties are written in it).

    Args:
        value: a JSON schema: a dict, or its JSON text; it must be a JSON object.

    Raises:
        GenerationError: not a JSON object, not JSON, or over a bound (``field`` is ``json_schema``).
    """
    if isinstance(value, (str, bytes)):
        value = _parse(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
    if not isinstance(value, Mapping):
        _fail(f"must be a JSON object (a JSON schema), got {type(value).__name__}")
    _walk(value)
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        _fail(f"is not JSON data: {exc}")
    except RecursionError:
        _fail(f"nests deeper than {MAX_DEPTH} levels")
    if len(text) > MAX_SCHEMA_CHARS:
        _fail(f"is {len(text)} characters long as compact JSON, more than {MAX_SCHEMA_CHARS} allowed")
    return text


def pattern_bytes(text: str, most: int = 12) -> bytes:
    """The first ``most`` distinct printable ASCII characters of the schema's patterns (not quotes or
    backslashes): what a string that must match one is likely made of (:mod:`.closing` tries them)."""
    found: list[int] = []
    stack: list[Any] = [json.loads(text)]
    while stack and len(found) < most:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(reversed(node))
        elif isinstance(node, Mapping):
            patterns = [node.get("pattern"), *(node.get("patternProperties") or {})]
            for c in "".join(p for p in patterns if isinstance(p, str)).encode("ascii", "ignore"):
                if 32 <= c < 127 and c not in (0x22, 0x5C) and c not in found and len(found) < most:
                    found.append(c)
            stack.extend(reversed(list(node.values())))
    return bytes(found)

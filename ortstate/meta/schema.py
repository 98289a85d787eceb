"""The JSON schema of ortstate's metadata (:mod:`ortstate.meta.model`): each reader checks one
field's type and range, and raises ``ValueError`` naming the field (``variables[2].shape``) and
what it got."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

__all__ = ["fail", "fields_of", "init_dim", "integer", "items", "state_dim", "text"]


def fail(where: str, expected: str, got: Any) -> ValueError:
    shown = repr(got)
    return ValueError(f"{where}: expected {expected}, got {shown[:60] + '...' if len(shown) > 60 else shown}")


def fields_of(value: Any, where: str, cls: type, required: set[str]) -> dict[str, Any]:
    """``value`` as the fields of ``cls``: a JSON object with every required key and no other."""
    if not isinstance(value, dict):
        raise fail(where, "an object", value)
    known = {f.name for f in fields(cls)}
    missing, unknown = sorted(required - value.keys()), sorted(set(value) - known)
    if missing or unknown:
        parts = [f"missing field(s) {', '.join(missing)}"] if missing else []
        parts += [f"unknown field(s) {', '.join(map(str, unknown))}"] if unknown else []
        raise ValueError(f"{where}: {'; '.join(parts)}")
    return value


def integer(value: Any, where: str, lo: int = 0) -> int:
    if type(value) is not int or value < lo:  # bool is an int to Python, not to the schema
        raise fail(where, f"an integer >= {lo}", value)
    return value


def text(value: Any, where: str, optional: bool = False, choices: Sequence[str] = ()) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str) or (choices and value not in choices) or (not choices and not value):
        expected = f"one of {', '.join(choices)}" if choices else "a non-empty string"
        raise fail(where, expected + (" or null" if optional else ""), value)
    return value


def items(value: Any, where: str, item: Callable[[Any, str], Any]) -> list[Any]:
    if not isinstance(value, list):
        raise fail(where, "a list", value)
    return [item(v, f"{where}[{i}]") for i, v in enumerate(value)]


def state_dim(value: Any, where: str) -> int | list[int | None]:
    if isinstance(value, list):
        if len(value) != 2:
            raise fail(where, "a dim: an integer or [lo, hi]", value)
        lo = integer(value[0], f"{where}[0]")
        return [lo, None if value[1] is None else integer(value[1], f"{where}[1]", lo)]
    return integer(value, where)


def init_dim(value: Any, where: str) -> int | list[Any]:
    if isinstance(value, list):
        if len(value) != 2 or not isinstance(value[0], str) or not value[0]:
            raise fail(where, "an integer or [input name, axis]", value)
        return [value[0], integer(value[1], f"{where}[1]")]
    return integer(value, where)

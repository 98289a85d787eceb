"""Translators keyed by OpenVINO op type and the first op version they handle."""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Context, Node

__all__ = ["Translator", "lookup", "translator", "registered"]

Translator = Callable[["Node", "Context"], list[str]]

_TABLE: dict[str, list[tuple[int, Translator]]] = {}


def translator(op_type: str, since: int) -> Callable[[Translator], Translator]:
    """Register ``fn`` for ``op_type`` versions ``since`` .. (the next registered version - 1).

    Raises:
        ValueError: the same (op type, version) is registered twice.
    """

    def register(fn: Translator) -> Translator:
        entries = _TABLE.setdefault(op_type, [])
        if any(v == since for v, _ in entries):
            raise ValueError(f"translator for {op_type}-{since} registered twice")
        insort(entries, (since, fn), key=lambda e: e[0])
        return fn

    return register


def lookup(op_type: str, version: int | None) -> Translator | None:
    """The translator for ``op_type`` at ``version``, or None."""
    best = None
    for since, fn in _TABLE.get(op_type, []):
        if version is not None and since <= version:
            best = fn
    return best


def registered() -> dict[str, list[int]]:
    """``{op type: [first versions]}``, for docs and ``--help``."""
    return {op: [v for v, _ in entries] for op, entries in sorted(_TABLE.items())}

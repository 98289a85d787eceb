"""Translators keyed by OpenVINO op type and the first op version they handle."""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Context, Node

__all__ = ["Translator", "lookup", "observe", "registered", "translator", "translator_for"]

Translator = Callable[["Node", "Context"], list[str]]

_TABLE: dict[str, list[tuple[int, Translator]]] = {}
# Callbacks told (op type, first version) each time a translator is handed out for a layer; the
# test suite uses one to check that every registered translator is exercised by some test.
_OBSERVERS: list[Callable[[str, int], None]] = []


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


def _resolve(op_type: str, version: int | None) -> tuple[int, Translator] | None:
    best = None
    for since, fn in _TABLE.get(op_type, []):
        if version is not None and since <= version:
            best = (since, fn)
    return best


def lookup(op_type: str, version: int | None) -> Translator | None:
    """The translator for ``op_type`` at ``version``, or None (asking does not count as a use)."""
    found = _resolve(op_type, version)
    return found[1] if found else None


def translator_for(op_type: str, version: int | None) -> Translator | None:
    """The translator for ``op_type`` at ``version`` about to translate a layer, or None; observers
    (see :func:`observe`) are told which registered version it is."""
    found = _resolve(op_type, version)
    if found is None:
        return None
    for observer in _OBSERVERS:
        observer(op_type, found[0])
    return found[1]


@contextmanager
def observe(callback: Callable[[str, int], None]) -> Iterator[None]:
    """Within the block, call ``callback(op_type, since)`` whenever a translator is used."""
    _OBSERVERS.append(callback)
    try:
        yield
    finally:
        _OBSERVERS.remove(callback)


def registered() -> dict[str, list[int]]:
    """``{op type: [first versions]}``: what converts (``ortstate inspect`` shows it beside each op
    type a model uses in a version that does not)."""
    return {op: [v for v, _ in entries] for op, entries in sorted(_TABLE.items())}

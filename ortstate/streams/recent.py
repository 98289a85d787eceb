"""The values of the keys used most recently: a small least-recently-used cache, for what a pool
keeps per batch shape (:mod:`.bound`) and per batch of streams (:mod:`.plan`).

Not ``functools.lru_cache``: what is kept is made by the caller after a run, may be dropped one key
at a time (a plan that missed) or all at once, and ``None`` is kept too (a shape found not to fit).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["Recent"]

V = TypeVar("V")


class Recent(Generic[V]):
    """At most ``size`` values, the least recently used dropped first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        value = self._kept.get(key)
        if value is not None:
            self._kept.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V) -> None:
        self._kept[key] = value
        self._kept.move_to_end(key)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)

    def __contains__(self, key: Hashable) -> bool:
        """Whether ``key`` is kept (its value perhaps None)."""
        return key in self._kept

    def drop(self, key: Hashable) -> None:
        self._kept.pop(key, None)

    def clear(self) -> None:
        self._kept.clear()

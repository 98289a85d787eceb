"""The KV budget: the positions a KV pool's arena holds for all its streams together (its
``kv_cache_bytes`` over one position's bytes, counted here once), and which stream makes room when
a step would hold more: the least recently stepped of those not in the step (moved out of the
arena, back exactly at its next step). Generation admits requests against the same budget
(:mod:`.requests`)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from ..errors import OrtStateError

__all__ = ["KvBudget"]


class KvBudget:
    """``kv_cache_bytes`` as positions of ``token_bytes`` each (one position of one stream, every
    KV variable).

    Raises:
        OrtStateError: a budget that does not hold one stream at ``max_context`` (and the position
            a hole's junk takes), or that is not an int.
    """

    def __init__(self, kv_cache_bytes: int, token_bytes: int, max_context: int) -> None:
        if type(kv_cache_bytes) is not int or kv_cache_bytes < token_bytes * (max_context + 1):
            raise OrtStateError(
                f"kv_cache_bytes must hold at least one stream at max_context ({max_context} positions: "
                f"{token_bytes * (max_context + 1)} bytes), got {kv_cache_bytes!r}"
            )
        self.bytes = kv_cache_bytes
        self.positions = kv_cache_bytes // token_bytes

    def over(self, held: int, new: int) -> bool:
        """Whether ``new`` positions beside the ``held`` ones pass the budget."""
        return held + new > self.positions

    @staticmethod
    def victim(candidates: Iterable[tuple[float, Hashable]]) -> Any:
        """What makes room: of ``candidates`` (``(last used, id)`` each: streams holding a row and
        not stepping now, or a server's idle conversations), the least recently used; None: none."""
        return min(candidates, default=(0.0, None))[1]

"""The KV arena: every KV variable of every stream in one array per variable, a row per slot.

A variable's arena is ``[slots, heads, capacity, head_size]`` (f32; heads and head size the
variable's own: a multi-head latent attention's keys and values differ), reserved once as anonymous
memory: the operating system gives a page to it only where a run writes, so a row costs what its
stream's cache holds, not ``capacity`` (the arena is paged, by the machine's pages). A row taken
back (its stream closed, reset, parked or preempted) returns its pages at once (``MADV_DONTNEED``).
The pool counts the positions the rows hold against its budget (``kv_cache_bytes``, see
:mod:`ortstate.scheduler.budget`) and preempts before a run would pass it.

A run binds ``arena[lo:hi]`` (consecutive rows: one C-contiguous block) as both the past and the
present of the fused attention, which appends each row's new keys and values after its own
``lengths[row]`` rows, in place. The lengths move only when the run is committed: a failed run
wrote only rows past every stream's length, which nothing reads.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Sequence

import numpy as np

from ...meta import VariableMeta

__all__ = ["KvArena", "default_budget"]

_PAGE = mmap.PAGESIZE


class KvArena:
    """``slots`` rows of ``capacity`` positions for each KV variable of ``variables``, whose rows are
    ``shapes`` (heads, head size) each."""

    def __init__(
        self, variables: Sequence[VariableMeta], shapes: Sequence[tuple[int, int]], slots: int, capacity: int
    ) -> None:
        # every head's block page-aligned in every variable: a row's pages are its own
        step = math.lcm(1, *(_PAGE // math.gcd(_PAGE, size * 4) for _, size in shapes))
        capacity = -(-capacity // step) * step
        self.variables = tuple(variables)
        self.slots, self.capacity = slots, capacity
        self.row_bytes = [heads * capacity * size * 4 for heads, size in shapes]  # a variable's
        self.token_bytes = sum(heads * size * 4 for heads, size in shapes)  # one position of one stream, all variables
        self.lengths = np.zeros(slots, np.int64)
        self._maps = [mmap.mmap(-1, max(1, slots * row)) for row in self.row_bytes]
        self.arrays = [
            np.frombuffer(m, np.float32, slots * heads * capacity * size).reshape(slots, heads, capacity, size)
            for m, (heads, size) in zip(self._maps, shapes)
        ]

    def held(self) -> int:
        """Positions the rows hold, all slots."""
        return int(self.lengths.sum())

    def release(self, slot: int) -> None:
        """Empty ``slot``'s row and give its pages back."""
        self.lengths[slot] = 0
        for m, row in zip(self._maps, self.row_bytes):
            if row % _PAGE == 0:
                m.madvise(mmap.MADV_DONTNEED, slot * row, row)

    def values(self, slot: int) -> list[np.ndarray]:
        """Copies of ``slot``'s caches, ``[1, heads, length, size]`` each (what a lone session holds)."""
        length = int(self.lengths[slot])
        return [a[slot : slot + 1, :, :length].copy() for a in self.arrays]

    def put(self, slot: int, values: Sequence[np.ndarray]) -> None:
        """Put ``values`` (as :meth:`values` gives, all of one length) into empty row ``slot``."""
        length = values[0].shape[2] if values else 0
        for a, value in zip(self.arrays, values):
            a[slot, :, :length] = value[0]
        self.lengths[slot] = length

    def close(self) -> None:
        self.arrays = []
        for m in self._maps:
            try:
                m.close()
            except BufferError:  # a view still exported (a caller kept an output): the GC frees it later
                pass
        self._maps = []


def default_budget(share: float = 0.25) -> int:
    """The KV arena's bytes when the pool is given none: ``share`` of the machine's memory."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 8 << 30
    return int(memory * share)

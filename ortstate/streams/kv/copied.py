"""KV caches a pool copies in and out of their arena rows: a decoder's caches whose attention the
converter left composed (no fused kernel reads and appends to them in place; ``ortstate inspect``
says why for each layer), so a pool takes any decoder whose caches it can place.

Such a cache lives in its arena row like a fused one (:mod:`.arena`). A run over the block of
rows ``lo..hi`` feeds each such variable a new ``[rows, heads, past, head size]`` array, ``past``
the run's longest cache: each stepping row's cache right-aligned in it (where the left-padded
``attention_mask`` says the row's positions are), zeros before it (masked out), as Hugging Face
feeds a left-padded batch; holes (block rows that do not step) get zeros. The model appends the
run's positions after ``past``; each stepping row's go to its arena row after its own length,
where the pool's commit makes them its cache (a failed run leaves only positions past every
stream's length, which nothing reads).

The cost, per run and copied variable, beside the composed attention's own concatenation (which a
lone session pays too): one copy of the stepping rows' caches in, and of their new positions out.
"""

from __future__ import annotations

import numpy as np

from ...errors import RunError
from .arena import KvArena
from .model import KvModel

__all__ = ["CopiedKv"]


class CopiedKv:
    """The copied KV variables of ``model`` (indices into ``model.kv`` and the arena's arrays)."""

    def __init__(self, model: KvModel, arena: KvArena) -> None:
        self.arena = arena
        self.index = [k for k, var in enumerate(model.kv) if not var.length_input]
        self.ids = [model.kv[k].id for k in self.index]
        self.inputs = [model.kv[k].state_input or "" for k in self.index]
        self.outputs = [model.kv[k].state_output or "" for k in self.index]
        self.check_past = False  # also check that the model kept the past it was fed (the load probe's)
        # one buffer a variable, reused run after run: a new array of a cache's size a run costs its
        # page faults (~2 ms for 400 KB on a loaded machine), more than the copy
        self._buffers = [np.empty(0, np.float32) for _ in self.index]

    def feed(self, lo: int, count: int, rows: np.ndarray, lengths: np.ndarray, past: int) -> list[np.ndarray]:
        """Each copied variable's past for a run of the block ``lo..lo + count``: ``rows`` the
        stepping rows (offsets in the block), ``lengths`` their caches' positions, ``past`` the run's."""
        pairs = list(zip(rows.tolist(), lengths.tolist()))
        holes = sorted(set(range(count)) - set(rows.tolist()))
        fed = []
        for n, k in enumerate(self.index):
            source = self.arena.arrays[k]
            heads, size = source.shape[1], source.shape[3]
            if self._buffers[n].size < count * heads * past * size:
                self._buffers[n] = np.empty(count * heads * past * size, np.float32)
            value = self._buffers[n][: count * heads * past * size].reshape(count, heads, past, size)
            for row, length in pairs:
                value[row, :, : past - length] = 0
                value[row, :, past - length :] = source[lo + row, :, :length]
            value[holes] = 0
            fed.append(value)
        return fed

    def keep(
        self,
        presents: list[np.ndarray],
        fed: list[np.ndarray],
        lo: int,
        rows: np.ndarray,
        lengths: np.ndarray,
        width: int,
    ) -> None:
        """Write each stepping row's ``width`` new positions of ``presents`` (the run's next values
        of the variables ``fed`` was given for) after its cache in its arena row.

        Raises:
            RunError: a next value that is not the past fed with ``width`` positions appended.
        """
        pairs = list(zip(rows.tolist(), lengths.tolist()))
        for k, var_id, present, given in zip(self.index, self.ids, presents, fed):
            count, heads, past, size = given.shape
            if present.shape != (count, heads, past + width, size) or (
                self.check_past and not np.array_equal(present[:, :, :past], given)
            ):
                raise RunError(
                    f"variable '{var_id}': its next value is not its past with the step's {width} position(s) "
                    "appended, the only change a pool can keep of a KV cache"
                )
            target = self.arena.arrays[k]
            for row, length in pairs:
                target[lo + row, :, length : length + width] = present[row, :, past:]

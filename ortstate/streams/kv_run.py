"""One run of a KV pool: some consecutive arena rows stepped together (the executor; what runs
where is decided by the pool).

The rows ``lo..hi`` are one block of each KV variable's arena, bound as the fused attention's
past and present. Rows of the block that do not step (*holes*: idle streams, free rows) run too,
on harmless feeds (token 0, a mask of ones, their keys where their caches end), and nothing of
theirs is kept: they write one position past their own length, which no one reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns

import numpy as np

from ..errors import RunError
from ..runtime.pingpong import QUIET, bind_output
from ..runtime.runners import ort_error
from .kv_arena import KvArena
from .kv_model import MASK, ROWS, KvModel
from .stats import Recorder

__all__ = ["Row", "RunResult", "KvRunner"]


@dataclass
class Row:
    """One stream's part of a run: its arena row, its feeds (one stream's, of ``width`` tokens), its
    cache length before the run; ``fixed``: its fixed states after the run, for the pool to commit."""

    slot: int
    feeds: Mapping[str, np.ndarray]
    width: int
    past: int
    fixed: list[np.ndarray] | None = None


@dataclass
class RunResult:
    """What a run gave each of its rows, by slot: outputs, and fixed states after it."""

    outputs: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    fixed: dict[int, list[np.ndarray]] = field(default_factory=dict)


class KvRunner:
    """Runs blocks of arena rows through the model."""

    def __init__(self, model: KvModel, arena: KvArena, fixed: list[np.ndarray], record: Recorder) -> None:
        self.model, self.arena, self.fixed, self.record = model, arena, fixed, record
        loaded = model.loaded
        self.binding, self.raw = loaded.fast.binding()
        self.run_bound = loaded.fast.run_bound
        self.output_names = list(loaded.output_names)
        self._lengths = [np.zeros((), np.int64) for _ in model.kv]
        for var, scalar in zip(model.kv, self._lengths):
            self.binding.bind_cpu_input(var.length_input or "", scalar)
        self._bound_block: tuple[int, int] | None = None

    def run(
        self, rows: Sequence[Row], ragged: bool, lengths: np.ndarray | None = None, last: bool = False
    ) -> RunResult:
        """Run ``rows`` (their slots consecutive or with holes between them; one width of tokens) as
        one batch over the arena block they span. ``lengths``: every slot's positions written so far
        (the arena's, and a step's runs before this one): a hole writes its junk after them.
        ``last``: the logits of the last position only (where the model can, see
        :mod:`ortstate.passes.last_logits`).

        Raises:
            RunError: ONNX Runtime failed; nothing was changed (lengths move at the pool's commit).
        """
        model, arena = self.model, self.arena
        lo = min(r.slot for r in rows)
        hi = max(r.slot for r in rows) + 1
        count, width = hi - lo, rows[0].width
        members = {r.slot - lo: r for r in rows}
        pasts = (arena.lengths if lengths is None else lengths)[lo:hi].copy()
        for k, r in members.items():
            pasts[k] = r.past
        logical = int(pasts.max()) if ragged else rows[0].past
        total = logical + width
        feeds: dict[str, np.ndarray] = {}
        for spec in model.feeds:
            if spec.name == ROWS:
                feeds[spec.name] = np.arange(count, dtype=spec.dtype)
            elif spec.axis is None:
                feeds[spec.name] = np.ascontiguousarray(rows[0].feeds[spec.name], spec.dtype)
            elif spec.name == MASK and ragged:
                feeds[spec.name] = self._mask(members, count, total, spec.dtype)
            elif len(members) == count:  # no hole: the rows in slot order, joined in one call
                column = [members[k].feeds[spec.name] for k in range(count)]
                feeds[spec.name] = column[0] if count == 1 else np.concatenate(column, axis=spec.axis)
            else:
                first = rows[0].feeds[spec.name]
                shape = list(first.shape)
                shape[spec.axis] = count
                joined = np.zeros(shape, spec.dtype)
                lead = (slice(None),) * spec.axis
                for k, r in members.items():
                    joined[(*lead, slice(k, k + 1))] = r.feeds[spec.name]
                feeds[spec.name] = joined
        seqlens = (pasts + width - 1).astype(np.int32)
        if len(members) < count:
            holes = [k for k in range(count) if k not in members]
            seqlens[holes] = pasts[holes]  # a hole writes its one junk position where its cache ends
        # row k's key j sits at j + pad in the left-padded mask (holes: pad 0)
        pads = np.zeros(count, np.int64)
        for k, r in members.items():
            pads[k] = total - (r.past + width)
        key_index = np.minimum(np.arange(total, dtype=np.int64)[None, :] + pads[:, None], total - 1)
        key_index = key_index.reshape(count, 1, 1, total)
        feeds[model.seqlens] = seqlens
        feeds[model.key_index] = key_index
        if model.last_logits:
            feeds[model.last_logits] = np.array(last)
        fixed_in = [array[lo:hi] for array in self.fixed]  # rows of C-contiguous arrays: bound as they are
        return self._run(lo, hi, logical, feeds, fixed_in, members, last)

    @staticmethod
    def _mask(members: Mapping[int, Row], count: int, total: int, dtype: np.dtype) -> np.ndarray:
        mask = np.ones((count, total), dtype)
        for k, r in members.items():
            given = np.asarray(r.feeds[MASK])
            width = given.shape[1]
            mask[k, : total - width] = 0
            mask[k, total - width :] = given[0]
        return mask

    def _run(
        self,
        lo: int,
        hi: int,
        logical: int,
        feeds: dict[str, np.ndarray],
        fixed_in: list[np.ndarray],
        members: Mapping[int, Row],
        last: bool,
    ) -> RunResult:
        model, binding = self.model, self.binding
        if self._bound_block != (lo, hi):
            for var, array in zip(model.kv, self.arena.arrays):
                block = array[lo:hi]
                binding.bind_input(var.state_input or "", "cpu", 0, block.dtype, list(block.shape), block.ctypes.data)
                bind_output(binding, var.state_output or "", block)
            self._bound_block = (lo, hi)
        for name in self.output_names:  # a fresh allocation each run: returned as it is
            binding.bind_output(name, "cpu")
        for spec in model.fixed:
            binding.bind_output(spec.var.state_output or "", "cpu")
        for scalar in self._lengths:
            scalar[...] = logical
        keep = []
        for name, value in feeds.items():
            value = np.ascontiguousarray(value)
            keep.append(value)
            binding.bind_cpu_input(name, value)
        for spec, value in zip(model.fixed, fixed_in):
            binding.bind_cpu_input(spec.var.state_input or "", value)
        start = perf_counter_ns()
        try:
            self.run_bound(self.raw, QUIET)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            self._bound_block = None
            raise ort_error(exc) from None
        self.record.run(len(members), (perf_counter_ns() - start) * 1e-9)
        values = [v.numpy() for v in binding.get_outputs()]
        # get_outputs() lists outputs in the order first bound: the KV presents, then the rest
        rest = values[len(model.kv) :]
        outs, states = rest[: len(self.output_names)], rest[len(self.output_names) :]
        if any(s.shape[0] != hi - lo for s in states):
            raise RunError("a fixed-size state came back with another batch; no stream was changed")
        result = RunResult()
        if last and not model.last_logits:  # the model computed every position: keep the last
            outs = [o[:, -1:] if o.ndim == 3 else o for o in outs]
        for k in members:
            result.outputs[lo + k] = {n: o[k : k + 1] for n, o in zip(self.output_names, outs)}
            result.fixed[lo + k] = [s[k : k + 1] for s in states]
        return result

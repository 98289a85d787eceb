"""One run of a KV pool: some consecutive arena rows stepped together (the executor; what runs
where is decided by the pool).

The rows ``lo..hi`` are one block of each KV variable's arena, bound as the fused attention's
past and present (a cache whose attention is composed is copied in and out instead:
:mod:`.copied`). Rows of the block that do not step (*holes*: idle streams, free rows) run too,
on harmless feeds (token 0, a mask of ones, their keys where their caches end), and nothing of
theirs is kept: they write one position past their own length, which no one reads.

Two ways in: :meth:`KvRunner.run` takes rows each with a stream's own feeds (any step);
:meth:`KvRunner.decode` takes the one-token steps of many streams already stacked in one batch,
and builds the block's feeds with a few whole-array numpy operations instead of a loop over the
rows: at a few hundred microseconds a run (a small model, many streams), a Python loop over 64
rows costs as much as the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import numpy as np

from ...errors import OrtStateError, RunError
from ...runtime.ort_adapter import FastBinding
from ...runtime.pingpong import QUIET, bind_output
from ...runtime.runners import ort_error
from ...scheduler.runs import Step
from ..stats import Recorder
from .arena import KvArena
from .copied import CopiedKv
from .model import MASK, ROWS, KvModel

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

    def placed(self, sid: int, slot: int, shared: Sequence[str]) -> Step:
        """Stream ``sid``'s step once its stream holds arena row ``slot``, as the scheduler sees it
        (``shared``: the inputs every row of a run shares)."""
        self.slot = slot
        mask = self.feeds.get(MASK)
        values = b"".join(np.asarray(self.feeds[name]).tobytes() for name in shared)
        return Step(sid, slot, self.width, self.past, None if mask is None else mask.shape[-1], values)


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
        self.io = FastBinding(loaded.fast)  # a run binds its feeds and outputs allocated anew: onnxruntime's own calls
        self.binding, self.raw = self.io.binding, self.io.raw
        self.run_bound = loaded.fast.run_bound
        self.output_names = list(loaded.output_names)
        self.copied = CopiedKv(model, arena)
        self.in_place = [(var, array) for var, array in zip(model.kv, arena.arrays) if var.length_input]
        self.allocated = self.output_names + [spec.var.state_output or "" for spec in model.fixed] + self.copied.outputs
        self._lengths = np.zeros(len(self.in_place), np.int64)  # one element a variable, all set at once
        for k, (var, _) in enumerate(self.in_place):
            self.binding.bind_input(var.length_input or "", "cpu", 0, np.int64, [], self._lengths[k:].ctypes.data)
        self._fed: list[np.ndarray] = []  # the arrays bound as inputs: alive until the next run binds others
        self._bound_block: tuple[int, int] | None = None
        self._flags = {flag: np.array(flag) for flag in (False, True)}

    def execute(
        self,
        rows: dict[int, Row],
        runs: Sequence[tuple[bool, list[int]]],
        results: dict[int, Any],
        raising: bool,
        last: bool,
        before_run: Callable[[], None] | None = None,
    ) -> dict[int, Row]:
        """Run a step's ``rows`` as ``runs`` (``(ragged, stream ids)`` each, as
        :func:`~ortstate.scheduler.runs.runs_of` decides); returns the rows that ran, their outputs put in
        ``results``. A failed run: its error in ``results`` for each of its streams, or raised
        (``raising``; the pool then commits none of the step). ``before_run``: called just before
        the first run (see :meth:`_run`)."""
        done: dict[int, Row] = {}
        written = self.arena.lengths.copy()  # a hole's junk goes after what this step's runs wrote
        for ragged, part in runs:
            hook, before_run = before_run, None
            try:
                result = self.run([rows[s] for s in part], ragged, written, last, hook)
            except OrtStateError as exc:
                if raising:
                    raise RunError(f"streams {', '.join(map(str, part))}: {exc}") from None
                results.update(dict.fromkeys(part, exc))
                continue
            for sid in part:
                slot = rows[sid].slot
                written[slot] = rows[sid].past + rows[sid].width
                results[sid] = result.outputs[slot]
                rows[sid].fixed = result.fixed[slot]
                done[sid] = rows[sid]
        return done

    def run(
        self,
        rows: Sequence[Row],
        ragged: bool,
        lengths: np.ndarray | None = None,
        last: bool = False,
        before_run: Callable[[], None] | None = None,
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
        at = np.fromiter(members, np.int64, len(members))
        self._positions(feeds, pasts, at, width, total)
        outs, states = self._run(lo, hi, logical, feeds, (at, pasts[at], width), last, before_run)
        result = RunResult()
        for k in members:
            result.outputs[lo + k] = {n: o[k : k + 1] for n, o in zip(self.output_names, outs)}
            result.fixed[lo + k] = [s[k : k + 1] for s in states]
        return result

    def decode(
        self,
        slots: np.ndarray,
        pasts: np.ndarray,
        feeds: Mapping[str, np.ndarray],
        last: bool,
        before_run: Callable[[], None] | None = None,
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """One-token steps of the streams in arena rows ``slots`` (distinct, any order; their caches
        hold ``pasts`` positions) as one ragged run over the block they span. ``feeds``: the
        streams' inputs stacked along their batch axes in the order of ``slots``,
        ``attention_mask`` left-padded to ``max(pasts) + 1`` columns (a row's own: its last
        ``past + 1``). Returns the outputs (``output_names`` order) and the fixed states after the
        run, rows in the order of ``slots``.

        Raises:
            RunError: ONNX Runtime failed; nothing was changed.
        """
        order = slots.tolist()  # a few dozen ints: cheaper in Python than in numpy calls
        lo, hi = min(order), max(order) + 1
        count, at = hi - lo, slots - lo
        in_order = len(order) == count and order == list(range(lo, hi))
        if in_order:
            block = pasts
        else:
            block = self.arena.lengths[lo:hi].copy()
            block[at] = pasts
        total = int(block.max()) + 1
        run: dict[str, np.ndarray] = {}
        for spec in self.model.feeds:
            value = feeds[spec.name]
            if spec.name == ROWS:
                run[spec.name] = np.arange(count, dtype=spec.dtype)
            elif spec.axis is None:
                run[spec.name] = value
            elif spec.name == MASK:
                run[spec.name] = self._decode_mask(value, pasts, at, count, total, in_order)
            elif in_order:
                run[spec.name] = value
            else:  # holes get zeros (token 0, position 0), the rows go to their places
                shape = list(value.shape)
                shape[spec.axis] = count
                joined = np.zeros(shape, spec.dtype)
                joined[(slice(None),) * spec.axis + (at,)] = value
                run[spec.name] = joined
        self._positions(run, block, at, 1, total)
        outs, states = self._run(lo, hi, total - 1, run, (at, pasts, 1), last, before_run)
        if not in_order:
            outs, states = [o[at] for o in outs], [s[at] for s in states]
        return outs, states

    @staticmethod
    def _decode_mask(
        given: np.ndarray, pasts: np.ndarray, at: np.ndarray, count: int, total: int, in_order: bool
    ) -> np.ndarray:
        """The block's ``[count, total]`` mask: ones for holes; a row's own columns right-aligned,
        zeros before them (whatever the caller's padding held)."""
        own = np.arange(total)[None, :] >= (total - 1 - pasts)[:, None]
        if given.shape[1] == total and len(at) == count:  # every row of the block, as wide
            rows = np.where(own, given, 0).astype(given.dtype, copy=False)
            return rows if in_order else rows[np.argsort(at)]
        mask = np.ones((count, total), given.dtype)
        rows = np.zeros((len(at), total), given.dtype)
        rows[:, total - given.shape[1] :] = given
        rows[~own] = 0
        mask[at] = rows
        return mask

    @staticmethod
    def _mask(members: Mapping[int, Row], count: int, total: int, dtype: np.dtype) -> np.ndarray:
        mask = np.ones((count, total), dtype)
        for k, r in members.items():
            given = np.asarray(r.feeds[MASK])
            width = given.shape[1]
            mask[k, : total - width] = 0
            mask[k, total - width :] = given[0]
        return mask

    def _positions(
        self, feeds: dict[str, np.ndarray], pasts: np.ndarray, at: np.ndarray, width: int, total: int
    ) -> None:
        """The pool's own inputs: each row's ``seqlens_k`` and where its keys sit in the mask.
        ``pasts``: the block's cache lengths; ``at``: the stepping rows in it (the others are holes)."""
        if not self.model.seqlens:  # no fused attention
            return
        seqlens = pasts.astype(np.int32)  # a hole writes its one junk position where its cache ends
        seqlens[at] += width - 1
        # row k's key j sits at j + pad in the left-padded mask (holes: pad 0)
        pads = np.zeros(len(pasts), np.int64)
        pads[at] = total - (pasts[at] + width)
        key_index = np.minimum(np.arange(total, dtype=np.int64)[None, :] + pads[:, None], total - 1)
        feeds[self.model.seqlens] = seqlens
        feeds[self.model.key_index] = key_index.reshape(len(pasts), 1, 1, total)

    def _run(
        self,
        lo: int,
        hi: int,
        logical: int,
        feeds: dict[str, np.ndarray],
        stepping: tuple[np.ndarray, np.ndarray, int],
        last: bool,
        before_run: Callable[[], None] | None,
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Bind and run; the outputs (``output_names`` order, the last position only when ``last``)
        and the fixed states after the run, a row per block row. ``stepping``: the rows that step
        (offsets in the block), their caches' lengths and the run's new positions, for the copied
        caches. ``before_run`` is called once all is bound, as the last Python before the run:
        whatever it hands to another thread then runs while ONNX Runtime holds no GIL, rather than
        taking turns with this thread's binding."""
        model, binding, io = self.model, self.binding, self.io
        if self._bound_block != (lo, hi):
            for var, array in self.in_place:
                block = array[lo:hi]
                binding.bind_input(var.state_input or "", "cpu", 0, block.dtype, list(block.shape), block.ctypes.data)
                bind_output(binding, var.state_output or "", block)
            self._bound_block = (lo, hi)
        for name in self.allocated:  # allocated anew each run: returned as it is
            io.bind_allocated_output(name)
        self._lengths[:] = logical
        if model.last_logits:
            feeds[model.last_logits] = self._flags[last]
        fed = []
        for name, value in feeds.items():
            value = np.ascontiguousarray(value)
            fed.append(value)
            io.bind_array(name, value)
        for spec, array in zip(model.fixed, self.fixed):  # rows of C-contiguous arrays: bound as they are
            block = array[lo:hi]
            fed.append(block)
            io.bind_array(spec.var.state_input or "", block)
        pasts = self.copied.feed(lo, hi - lo, stepping[0], stepping[1], logical)
        for name, value in zip(self.copied.inputs, pasts):
            fed.append(value)
            io.bind_array(name, value)
        self._fed = fed
        if before_run is not None:
            before_run()
        start = perf_counter_ns()
        try:
            self.run_bound(self.raw, QUIET)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            self._bound_block = None
            raise ort_error(exc) from None
        self.record.run(len(stepping[0]), (perf_counter_ns() - start) * 1e-9)
        return self._results(hi - lo, pasts, lo, stepping, last)

    def _results(
        self, count: int, pasts: list[np.ndarray], lo: int, stepping: tuple[np.ndarray, np.ndarray, int], last: bool
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The run's outputs and fixed states (``count`` rows each), once what it appended to the
        copied caches (fed ``pasts``) is kept in the arena."""
        values = self.io.outputs()  # in the order first bound: the in-place KV presents, then the rest
        first = len(self.in_place)
        rest = [values[k].numpy() for k in range(first, first + len(self.allocated))]
        named, copied = len(self.output_names), len(rest) - len(pasts)
        outs, states = rest[:named], rest[named:copied]
        if any(s.shape[0] != count for s in states):
            raise RunError("a fixed-size state came back with another batch; no stream was changed")
        self.copied.keep(rest[copied:], pasts, lo, *stepping)
        if last and not self.model.last_logits:  # the model computed every position: keep the last
            outs = [o[:, -1:] if o.ndim == 3 else o for o in outs]
        return outs, states

"""The stream pool of a decoder with KV caches: what :func:`~ortstate.streams.StreamPool` opens for
such a model (a :class:`~ortstate.streams.Pool`).

Each stream's caches are one row of the KV arena (:mod:`.arena`); its fixed-size states (the
convolution and SSM states of hybrids) one row of plain arrays. A step runs every stream fed one
token whose rows can share a run as one batch (continuous batching: the streams' caches may hold
any lengths, see :mod:`.model`), and each stream fed several tokens (a prompt, or a chunk of
one) in a run of its own, then commits: lengths move, fixed states are written back. A step that
fails commits nothing for the streams it failed.

The arena's memory is bounded by ``kv_cache_bytes``: before a step would hold more, the pool
*preempts* streams that are not in the step, least recently stepped first: their caches are
copied to host memory (or to ``park_dir``) and their rows given back; their next step brings them
back exactly (:mod:`.rows` keeps where each stream is).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from ...errors import OrtStateError, RunError, StateError
from ...runtime import LoadedModel
from ...scheduler.budget import KvBudget
from ...scheduler.runs import SINGLE, one_decode_run, runs_of
from ..checks import check_logits, check_slots, check_step
from ..loop import PoolLoop
from ..stats import PoolStats, Recorder
from .arena import KvArena, default_budget
from .batch import check_batch_feeds, split_batch, stack_outputs
from .model import MASK, check_stream_feeds, load_kv_model
from .probe import probe_batching, probe_prompts
from .rows import KvRows, KvStream
from .run import KvRunner, Row
from .snapshot import as_values, from_values, read_stream, write_stream

__all__ = ["KvPool", "DEFAULT_MAX_CONTEXT"]

DEFAULT_MAX_CONTEXT = 4096
Feeds = Mapping[str, Any]


class KvPool:
    """Streams of a KV-cache decoder, batched per step: a :class:`~ortstate.streams.Pool` (the
    arguments as :class:`~ortstate.streams.SlotPool`'s), plus ``kv_cache_bytes``, the arena's memory
    (default: a quarter of the machine's), and ``max_context``, the positions one stream's cache
    holds; and :meth:`fork`, :meth:`decode`, :meth:`length` besides the protocol."""

    def __init__(
        self,
        model: Any,
        slots: int = 256,
        *,
        kv_cache_bytes: int | None = None,
        max_context: int = DEFAULT_MAX_CONTEXT,
        park_dir: str | os.PathLike[str] | None = None,
        max_batch: int | None = None,
        max_delay: float = 0.002,
        sess_options: ort.SessionOptions | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        check_slots(slots)
        if type(max_context) is not int or max_context < 1:
            raise OrtStateError(f"max_context must be a positive integer, got {max_context!r}")
        self._kv = load_kv_model(model, sess_options, providers)
        self._kv.batching = probe_batching(self._kv)
        self._kv.prompts_batch = self._kv.batching != SINGLE and probe_prompts(self._kv)
        self.slots = slots
        self.max_context = max_context
        self._arena = KvArena(self._kv.kv, self._kv.kv_shapes, slots, max_context + 1)  # +1: a hole's junk position
        given = kv_cache_bytes if kv_cache_bytes is not None else default_budget()
        self.budget = KvBudget(given, self._arena.token_bytes, max_context)  # what generation admits against too
        self.kv_cache_bytes = self.budget.bytes
        self._shared = [s.name for s in self._kv.feeds if s.axis is None]  # one value for a run's rows
        self._fixed = [np.zeros((slots, *f.shape[1:]), f.carrier) for f in self._kv.fixed]
        self._record = Recorder()
        self._runner = KvRunner(self._kv, self._arena, self._fixed, self._record)
        self._rows = KvRows(
            self._kv, self._arena, self._fixed, self.budget, None if park_dir is None else Path(park_dir)
        )
        self._streams = self._rows.streams  # (the same dict: read on every decode)
        self._lock = threading.RLock()
        self.worker = PoolLoop(self, max_batch or slots, max_delay)  # the queue and thread behind:
        self.submit, self.call = self.worker.submit, self.worker.call  # (see the Pool protocol)

    # -- lifecycle --------------------------------------------------------------------------------
    def open(self) -> int:
        """A new stream with empty caches; returns its id (ids are never reused)."""
        with self._lock:
            slot = self._rows.take_slot(set(), "open a stream")
            self._rows.fixed_start(slot)
            return self._rows.add(KvStream(slot))

    def reset(self, sid: int) -> None:
        """Put stream ``sid`` back at its initial state (empty caches)."""
        with self._lock:
            self._rows.reset(self._rows.get(sid))

    def close(self, sid: int) -> None:
        """End stream ``sid`` and free its row (or what it was moved out to)."""
        with self._lock:
            self._rows.close(sid)

    def fork(self, sid: int, length: int | None = None) -> int:
        """A new stream whose caches and states are a copy of stream ``sid``'s (a prompt fed once,
        continued several ways); copied inside the arena, row to row, when ``sid`` holds one;
        ``length``: its first ``length`` positions only (a prompt's start, see :attr:`prefix_sharing`).

        Raises:
            StateError: ``sid`` not open, a ``length`` :meth:`trim` refuses; PoolFullError: no room.
        """
        with self._lock:
            kv, fixed = self._rows.values(self._rows.get(sid), copy=False)  # copied into the new row
            if length is not None:
                kv = [a[:, :, : self._rows.cut(sid, kv[0].shape[2], length)] for a in kv]
            return self._rows.new(kv, fixed, "fork a stream", {sid})

    def trim(self, sid: int, length: int) -> None:
        """Cut stream ``sid``'s caches to their first ``length`` positions (a prompt's start).

        Raises:
            StateError: ``sid`` not open, ``length`` past what it holds, no :attr:`prefix_sharing`.
        """
        with self._lock:
            self._rows.trim(self._rows.get(sid), sid, length)

    @property
    def prefix_sharing(self) -> bool:
        """Whether a stream's state is KV caches alone, a position a token (no convolution or SSM
        state): their first positions are then what those tokens alone make (a prefix to share)."""
        return not self._kv.fixed

    def save(self, sid: int, path: str | os.PathLike[str]) -> None:
        """Write stream ``sid``'s variables as a ``StatefulSession`` snapshot of the model."""
        with self._lock:
            write_stream(self._kv, *self._rows.values(self._rows.get(sid), copy=False), path)

    def load(self, path: str | os.PathLike[str]) -> int:
        """A new stream at a snapshot's state (:meth:`save`'s, or a one-stream ``StatefulSession``'s)."""
        with self._lock:
            kv, fixed = read_stream(self._kv, path)
            self._check_context(kv, str(path))
            return self._rows.new(kv, fixed, "load a stream")

    @property
    def variables(self) -> tuple[str, ...]:
        """The ids of the model's variables, in the order of :meth:`values`."""
        return tuple(v.id for v in self._kv.variables)

    def values(self, sid: int) -> list[np.ndarray | None]:
        """Stream ``sid``'s variables in the model's order, one stream's each (copies; caches
        ``[1, heads, length, head size]``, None where empty): what :meth:`restore` takes back."""
        with self._lock:
            return as_values(self._kv, *self._rows.values(self._rows.get(sid)))

    def restore(self, values: Sequence[np.ndarray | None]) -> int:
        """A new stream holding ``values`` (:meth:`values`' of a pool of the same model); its id.

        Raises:
            StateError: not one value per variable of one stream's shape, caches of different
                lengths or over ``max_context``; PoolFullError: no row or KV budget for it.
        """
        kv, fixed = from_values(self._kv, values, "restore")
        self._check_context(kv, "restore")
        with self._lock:
            return self._rows.new(kv, fixed, "restore a stream")

    def put(self, sid: int, values: Sequence[np.ndarray | None]) -> None:
        """Set stream ``sid``'s variables to ``values`` (as :meth:`restore` takes them); it holds
        them out of the arena until its next step brings them in."""
        kv, fixed = from_values(self._kv, values, f"stream {sid}")
        self._check_context(kv, f"stream {sid}")
        with self._lock:
            self._rows.move_out(self._rows.get(sid), kv, fixed)

    def park(self, sid: int) -> None:
        """Move stream ``sid``'s state to ``park_dir`` and free its row; its next step brings it back."""
        with self._lock:
            if self._rows.park_dir is None:
                raise OrtStateError("the pool has no park_dir to park streams in")
            self._rows.park(sid)

    def park_idle(self, seconds: float) -> list[int]:
        """Park every stream that has not stepped for ``seconds``; returns their ids."""
        with self._lock:
            idle = self._rows.idle(seconds)
            for sid in idle:
                self.park(sid)
            return idle

    # -- stepping ---------------------------------------------------------------------------------
    def step(
        self,
        feeds: Mapping[int, Feeds],
        errors: str = "raise",
        *,
        logits: str = "all",
        before_run: Callable[[], None] | None = None,
    ) -> dict[int, Any]:
        """Step each stream of ``feeds`` once: one batched run for the one-token steps that fit
        together, one run for each step of several tokens; returns ``{stream id: {output: array}}``
        (``errors="return"``: a failed stream's entry is its error, the others step).
        ``logits="last"``: the outputs hold the last position's logits only (a prompt's run then
        skips the LM head for the others; :attr:`last_logits` says whether the model can).
        ``before_run``: called once, in this thread, just before the first ONNX Runtime run (once
        its inputs are bound), not at all when no run starts: what it hands to another thread
        (a wake of an event loop) runs while ONNX Runtime holds no GIL."""
        check_step(feeds, errors)
        check_logits(logits)
        raising = errors == "raise"
        with self._lock:
            results: dict[int, Any] = {}
            rows: dict[int, Row] = {}
            for sid, given in feeds.items():
                try:
                    rows[sid] = self._row(sid, given)
                except OrtStateError as exc:
                    if raising:
                        raise
                    results[sid] = exc
            try:
                self._rows.place(rows.keys(), sum(row.width for row in rows.values()))
            except OrtStateError as exc:
                if raising:
                    raise
                results.update(dict.fromkeys(rows, exc))
                return results
            steps = [row.placed(sid, self._streams[sid].slot, self._shared) for sid, row in rows.items()]
            runs = runs_of(steps, self._kv.batching, self._kv.prompts_batch)
            staged = self._runner.execute(rows, runs, results, raising, logits == "last", before_run)
            self._rows.commit(staged)
            return results

    def decode(
        self,
        sids: Sequence[int],
        feeds: Feeds,
        *,
        logits: str = "all",
        before_run: Callable[[], None] | None = None,
    ) -> dict[str, np.ndarray]:
        """Step each stream of ``sids`` by one token, their feeds given as one batch (Hugging Face's
        batch layout, see :mod:`.batch`: row ``i`` of every input is stream ``sids[i]``'s); returns
        each output with the streams' rows in that order. What :meth:`step` gives them, without a
        dict per stream: one run where the model batches ragged rows (streams moved out of the
        arena brought back first, room made within the budget), else the batch is split and
        stepped. A failure raises and commits nothing. ``before_run``: as :meth:`step`'s.

        Raises:
            RunError: feeds that are not such a batch, a stream listed twice or past max_context, a
                failed run; StateError: a stream not open; PoolFullError: as :meth:`step`.
        """
        check_logits(logits)
        with self._lock:
            try:
                streams = [self._streams[sid] for sid in sids]
            except (KeyError, TypeError):
                streams = [self._rows.get(sid) for sid in sids]  # says which
            if not streams or len(set(sids)) != len(streams):
                raise RunError(f"decode takes distinct open streams, got {list(sids)}")
            slots = np.array([-1 if s.slot is None else s.slot for s in streams])
            pasts = np.where(slots < 0, [s.length for s in streams], self._arena.lengths[slots])
            arrays = check_batch_feeds(sids, feeds, self._kv.feeds, pasts, self.max_context)
            mask = arrays.get(MASK)
            if not one_decode_run(self._kv.batching, None if mask is None else mask.shape[1], int(pasts.max())):
                split = split_batch(arrays, self._kv.feeds, pasts)
                got = self.step(dict(zip(sids, split)), logits=logits, before_run=before_run)
                return stack_outputs(self._runner.output_names, [got[sid] for sid in sids])
            if slots.min() < 0 or self.budget.over(self._arena.held(), len(slots)):
                self._rows.place(set(sids), len(sids))
                slots = np.array([s.slot for s in streams])
            try:
                outs, states = self._runner.decode(slots, pasts, arrays, logits == "last", before_run)
            except OrtStateError as exc:
                raise RunError(f"streams {', '.join(map(str, sids))}: {exc}") from None
            self._rows.commit_decode(streams, slots, pasts, states)
            return dict(zip(self._runner.output_names, outs))

    def stats(self) -> PoolStats:
        """Streams, rows, KV memory, runs, batch sizes and run latencies so far."""
        with self._lock:
            parked = sum(1 for s in self._streams.values() if s.slot is None)
            base = self._record.stats(
                streams=len(self._streams),
                parked=parked,
                slots=self.slots,
                state_bytes=sum(a.nbytes for a in self._fixed) + self._arena.held() * self._arena.token_bytes,
                ticks=self.worker.latencies,
            )
            return dataclasses.replace(base, kv_cache_bytes=self.kv_cache_bytes, preempted=self._rows.preempted)

    def kv_usage(self) -> float:
        """The share of the KV budget the streams' caches hold now (read without the lock, for a
        server's metrics: a moment's value)."""
        return self._arena.held() / self.budget.positions

    def length(self, sid: int) -> int:
        """How many positions stream ``sid``'s caches hold."""
        with self._lock:
            return self._rows.length(self._rows.get(sid))

    @property
    def loaded(self) -> LoadedModel:
        """The model as the pool runs it (its explicit form, the caches in the arena)."""
        return self._kv.loaded

    @property
    def inputs(self) -> list[Any]:
        """The inputs a stream feeds (onnxruntime ``NodeArg``s, batch 1 each), as a lone session's."""
        fed = {s.name for s in self._kv.feeds}
        return [i for i in self._kv.loaded.inputs if i.name in fed]

    @property
    def last_logits(self) -> bool:
        """Whether ``step(..., logits="last")`` skips the LM head's other positions (else it slices)."""
        return self._kv.last_logits is not None

    @property
    def batching(self) -> str:
        """How one-token steps batch: "ragged" (any cache lengths in one run), "uniform" (streams of
        one length), "single" (each alone); found at load (:mod:`.probe`)."""
        return self._kv.batching

    @property
    def token_bytes(self) -> int:
        """The KV memory one position of one stream takes (all KV variables)."""
        return self._arena.token_bytes

    @property
    def streams(self) -> list[int]:
        """The ids of the open streams (moved out of the arena ones included)."""
        with self._lock:
            return sorted(self._streams)

    def __repr__(self) -> str:
        return f"KvPool({self._kv.loaded.origin!r}, slots={self.slots}, streams={len(self._streams)})"

    # -- a step -----------------------------------------------------------------------------------
    def _row(self, sid: int, given: Any) -> Row:
        """Stream ``sid``'s feeds checked as a lone session of the model takes them."""
        stream = self._rows.get(sid)
        past = self._rows.length(stream)
        arrays, width = check_stream_feeds(sid, given, self._kv.feeds, past, self.max_context)
        return Row(stream.slot if stream.slot is not None else -1, arrays, width, past)

    def _check_context(self, kv: Sequence[np.ndarray], where: str) -> None:
        if kv[0].shape[2] > self.max_context:
            raise StateError(f"{where}: its caches hold {kv[0].shape[2]} positions, over max_context")

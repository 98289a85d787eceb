"""SlotPool: many independent streams of a stateful model whose variables have a fixed size per
stream, stepped together in one batched run.

Each stream owns a slot: one row, along each variable's batch axis (see :mod:`.layout`), of the
pool's state arrays (:mod:`.slots`). A step gathers the stepping streams' rows into the batch, runs
the model's explicit form once in ONNX Runtime, and scatters the new states back only once every
run of the step has succeeded, so a failed step changes no stream.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from ..errors import OrtStateError, PoolFullError, StateError
from ..runtime import LoadedModel
from .batch import BatchRunner, Groups
from .checks import check_slots, check_step
from .feeds import check_feeds, check_not_empty, quick_feeds
from .layout import load_pool_model
from .loop import PoolLoop
from .slots import SlotStates
from .stats import PoolStats, Recorder

__all__ = ["SlotPool"]

Feeds = Mapping[str, Any]
Outputs = dict[str, np.ndarray]


class SlotPool:
    """Independent streams of one stateful model, each as if alone in a ``StatefulSession``, stepped
    together: one ONNX Runtime run per step for all streams whose feeds have the same shapes. What
    :func:`~.pool.StreamPool` opens for a model whose variables have a fixed size per stream; a
    :class:`~.pool.Pool`.

    Args:
        model: an IR ``.xml``, an ONNX path, its bytes or an ``onnx.ModelProto``, as
            ``StatefulSession`` takes; its variables need a fixed size per stream.
        slots: how many streams can hold a slot at once (the state arrays are allocated for all).
        park_dir: where :meth:`park` writes idle streams' snapshots (none: parking is refused).
        max_batch, max_delay: ``submit``'s batching: a tick runs once ``max_batch`` streams wait
            or ``max_delay`` seconds after the first one; when steps came in while a tick ran, the
            next runs at once.
        sess_options, providers: as ``StatefulSession``'s.

    A stream is one row of the model's batch: its feeds have 1 along each input's batch axis, and
    its outputs come back with 1 there, as from a lone session fed those feeds.
    """

    def __init__(
        self,
        model: Any,
        slots: int = 1024,
        *,
        park_dir: str | os.PathLike[str] | None = None,
        max_batch: int | None = None,
        max_delay: float = 0.002,
        sess_options: ort.SessionOptions | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        check_slots(slots)
        self._model, self.layout, fingerprint = load_pool_model(model, sess_options, providers)
        self.slots = slots
        self._states = SlotStates(self.layout.states, slots, fingerprint)
        self._free = list(range(slots - 1, -1, -1))  # pop() takes the lowest free slot
        self._slot: dict[int, int] = {}
        self._parked: dict[int, Path | None] = {}  # None: parked at the initial state, no file
        self._last = np.zeros(slots)  # per slot: when its stream last stepped or came in (monotonic)
        self._next = 0
        self._park_dir = None if park_dir is None else Path(park_dir)
        self._lock = threading.RLock()
        self._record = Recorder()
        self.worker = PoolLoop(self, max_batch or slots, max_delay)  # the queue and thread behind:
        self.submit, self.call = self.worker.submit, self.worker.call  # (see the Pool protocol)
        self._batches = BatchRunner(self._model, self.layout, self._states, self._record)

    # -- lifecycle --------------------------------------------------------------------------------
    def open(self) -> int:
        """A new stream at the model's initial state; returns its id (ids are never reused).

        Raises:
            PoolFullError: every slot is taken (close or park a stream first).
        """
        with self._lock:
            slot = self._take_slot("open a stream")
            self._states.start(slot)
            return self._add(slot)

    def reset(self, sid: int) -> None:
        """Put stream ``sid`` back at the initial state."""
        with self._lock:
            if sid in self._parked:
                self._drop_file(sid)
                self._parked[sid] = None
            else:
                self._states.start(self._slot_of(sid))

    def close(self, sid: int) -> None:
        """End stream ``sid`` and free its slot (or its parked file)."""
        with self._lock:
            if sid in self._parked:
                self._drop_file(sid)
                del self._parked[sid]
            else:
                self._free.append(self._slot_of(sid))
                del self._slot[sid]
                self._batches.plans.clear()

    def save(self, sid: int, path: str | os.PathLike[str]) -> None:
        """Write stream ``sid``'s variables to a snapshot that loads into any pool of the same model,
        and into its ``StatefulSession`` (``load_state``)."""
        with self._lock:
            if sid in self._parked:
                self._resume(sid)
            self._states.save(self._slot_of(sid), path)

    def load(self, path: str | os.PathLike[str]) -> int:
        """A new stream at the state of a snapshot (:meth:`save`'s, or a ``StatefulSession``'s of
        the same model holding one stream); returns its id.

        Raises:
            StateError: the snapshot is missing, damaged, of another model, or holds several streams.
            PoolFullError: every slot is taken.
        """
        with self._lock:
            values = self._states.read(path)
            slot = self._take_slot("load a stream")
            self._states.write(slot, values)
            return self._add(slot)

    @property
    def variables(self) -> tuple[str, ...]:
        """The ids of the model's variables, in the order of :meth:`values`."""
        return tuple(s.var.id for s in self.layout.states)

    def values(self, sid: int) -> list[np.ndarray | None]:
        """Stream ``sid``'s variables in :attr:`layout`'s order, one stream's each (copies; None: not
        initialised yet): what :meth:`restore` takes back."""
        with self._lock:
            if sid in self._parked:
                self._resume(sid)
            return self._states.values(self._slot_of(sid))

    def restore(self, values: Sequence[np.ndarray | None]) -> int:
        """A new stream holding ``values`` (:meth:`values`' of a pool of the same model); its id.

        Raises:
            StateError: not one value per variable, each of one stream's shape.
            PoolFullError: every slot is taken.
        """
        self._states.check_values(values)
        with self._lock:
            slot = self._take_slot("restore a stream")
            self._states.write(slot, values)
            return self._add(slot)

    def put(self, sid: int, values: Sequence[np.ndarray | None]) -> None:
        """Set stream ``sid``'s variables to ``values`` (as :meth:`restore` takes them)."""
        self._states.check_values(values)
        with self._lock:
            if sid in self._parked:
                self._resume(sid)
            self._states.write(self._slot_of(sid), values)

    def park(self, sid: int) -> None:
        """Move stream ``sid``'s state to a file in ``park_dir`` and free its slot; its next step (or
        save) brings it back, exactly as it was."""
        with self._lock:
            if self._park_dir is None:
                raise OrtStateError("the pool has no park_dir to park streams in")
            if sid in self._parked:
                return
            slot = self._slot_of(sid)
            path = self._park_dir / f"stream-{sid}.npz"
            self._park_dir.mkdir(parents=True, exist_ok=True)
            self._states.save(slot, path)
            self._parked[sid] = path
            del self._slot[sid]
            self._free.append(slot)
            self._batches.plans.clear()

    def park_idle(self, seconds: float) -> list[int]:
        """Park every stream that has not stepped for ``seconds``; returns their ids."""
        with self._lock:
            since = time.monotonic() - seconds
            idle = [sid for sid, slot in self._slot.items() if self._last[slot] <= since]
            for sid in idle:
                self.park(sid)
            return idle

    # -- stepping ---------------------------------------------------------------------------------
    def step(self, feeds: Mapping[int, Feeds], errors: str = "raise") -> dict[int, Any]:
        """Step the streams of ``feeds`` (``{stream id: {input: array}}``), each once: one batched run
        per distinct feed shape; returns ``{stream id: {output: array}}``.

        With ``errors="raise"`` a bad stream id or feed, or a failed run, raises (naming the stream)
        and changes no stream; with ``errors="return"`` that stream's entry is its
        :class:`OrtStateError` and the others step.
        """
        check_step(feeds, errors)
        with self._lock:
            results, rows = self._batches.planned(feeds)
            if results is not None:
                self._last[rows] = time.monotonic()
                return results
            return self._step(feeds, errors == "raise")

    def stats(self) -> PoolStats:
        """Streams, slots, state memory, runs, batch sizes and run latencies so far."""
        with self._lock:
            return self._record.stats(
                streams=len(self._slot) + len(self._parked),
                parked=len(self._parked),
                slots=self.slots,
                state_bytes=self._states.nbytes,
                ticks=self.worker.latencies,
            )

    @property
    def loaded(self) -> LoadedModel:
        """The model as the pool runs it (its explicit form, the batch dynamic; see :class:`LoadedModel`)."""
        return self._model

    @property
    def streams(self) -> list[int]:
        """The ids of the open streams (parked ones included)."""
        with self._lock:
            return sorted([*self._slot, *self._parked])

    # -- inside -----------------------------------------------------------------------------------
    def _step(self, feeds: Mapping[int, Feeds], raising: bool) -> dict[int, Any]:
        """:meth:`step` the general way: each stream's feeds checked, one run per distinct shape; a
        step of one run that went through bound buffers is planned for its next time."""
        failed: dict[int, OrtStateError] = {}
        groups: Groups = {}
        for sid, given in feeds.items():
            try:
                self._known(sid)
                arrays = quick_feeds(given, self.layout.inputs) or check_feeds(sid, given, self.layout.inputs)
                if self._model.guards:  # a planned step has the shapes of one checked here
                    check_not_empty(sid, arrays, self.layout.inputs, self._model.guards)
                if sid in self._parked:
                    self._resume(sid)
            except OrtStateError as exc:
                if raising:
                    raise
                failed[sid] = exc
                continue
            shared = tuple(a.tobytes() for a, s in zip(arrays, self.layout.inputs) if s.axis is None)
            groups.setdefault((tuple(a.shape for a in arrays), shared), []).append((sid, arrays))
        results, staged = self._batches.run_groups(groups, self._slot.__getitem__, raising, failed)
        for slots, states in staged:
            self._states.scatter(slots, states)
            self._last[slots] = time.monotonic()
        if not failed and len(staged) == 1:
            ((shapes, _),) = groups
            self._batches.plan(tuple(feeds), staged[0][0], shapes)
        results.update(failed)
        return results

    def _known(self, sid: Any) -> None:
        if sid not in self._slot and sid not in self._parked:
            raise StateError(f"stream {sid!r} is not open")

    def _slot_of(self, sid: int) -> int:
        self._known(sid)
        return self._slot[sid]

    def _take_slot(self, what: str) -> int:
        if not self._free:
            raise PoolFullError(
                f"cannot {what}: all {self.slots} slots are taken ({len(self._parked)} streams parked); "
                "close or park a stream first"
            )
        return self._free.pop()

    def _add(self, slot: int) -> int:
        sid, self._next = self._next, self._next + 1
        self._slot[sid] = slot
        self._last[slot] = time.monotonic()
        return sid

    def _resume(self, sid: int) -> None:
        path = self._parked[sid]
        values = None if path is None else self._states.read(path)
        slot = self._take_slot(f"resume parked stream {sid}")
        if values is None:
            self._states.start(slot)
        else:
            self._states.write(slot, values)
        self._drop_file(sid)
        del self._parked[sid]
        self._slot[sid] = slot
        self._last[slot] = time.monotonic()
        self._batches.plans.clear()

    def _drop_file(self, sid: int) -> None:
        path = self._parked.get(sid)
        if path is not None:
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"SlotPool({self._model.origin!r}, slots={self.slots}, streams={len(self._slot) + len(self._parked)})"

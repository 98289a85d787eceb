"""Where each stream of a KV pool is: a row of the arena, or moved out (to host memory when
preempted, to ``park_dir`` when parked), and the rows' bookkeeping (free rows, the KV budget).

A stream's caches are one row of the KV arena (:mod:`.arena`), its fixed-size states (hybrids'
convolution and SSM states) one row of plain arrays. Before a step would hold more positions than
the budget, or when no row is free, a stream not in the step is moved out (*preempted*): the one
the budget names (:class:`~ortstate.scheduler.budget.KvBudget`, the least recently stepped); its next
step brings it back exactly (:meth:`KvRows.place`).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import PoolFullError, StateError
from ...scheduler.budget import KvBudget
from .arena import KvArena
from .model import KvModel
from .run import Row
from .snapshot import read_stream, write_stream

__all__ = ["KvRows", "KvStream"]


class KvStream:
    """One stream: its row (None: moved out), what it was moved out to, its length while out."""

    __slots__ = ("slot", "held", "length", "last")

    def __init__(self, slot: int | None) -> None:
        self.slot = slot
        self.held: tuple[list[np.ndarray], list[np.ndarray]] | Path | None = None  # when preempted or parked
        self.length = 0  # the positions its caches hold while out of the arena
        self.last = time.monotonic()


class KvRows:
    """The streams of a pool and the rows they hold (see the module docstring)."""

    def __init__(
        self, kv: KvModel, arena: KvArena, fixed: list[np.ndarray], budget: KvBudget, park_dir: Path | None
    ) -> None:
        self.kv, self.arena, self.fixed = kv, arena, fixed
        self.budget = budget
        self.park_dir = park_dir
        self.streams: dict[int, KvStream] = {}
        self.free = list(range(arena.slots - 1, -1, -1))
        self.next = 0
        self.preempted = 0

    def get(self, sid: Any) -> KvStream:
        stream = self.streams.get(sid)
        if stream is None:
            raise StateError(f"stream {sid!r} is not open")
        return stream

    def add(self, stream: KvStream) -> int:
        sid, self.next = self.next, self.next + 1
        self.streams[sid] = stream
        return sid

    def new(
        self, kv: Sequence[np.ndarray], fixed: Sequence[np.ndarray], what: str, keep: Set[int] = frozenset()
    ) -> int:
        """A new stream holding ``kv`` and ``fixed`` in a row taken for it (preempting streams not
        in ``keep`` if need be); its id."""
        slot = self.take_slot(keep, what, kv[0].shape[2])
        self.arena.put(slot, kv)
        self.fixed_put(slot, fixed)
        return self.add(KvStream(slot))

    def commit(self, done: Mapping[int, Row]) -> None:
        """The rows of a step's runs that went through hold what they ran: lengths, fixed states."""
        now = time.monotonic()
        for sid, row in done.items():
            self.arena.lengths[row.slot] = row.past + row.width
            for array, value in zip(self.fixed, row.fixed or []):
                array[row.slot] = value[0]
            self.streams[sid].last = now

    def commit_decode(self, streams: Sequence[KvStream], slots: np.ndarray, pasts: np.ndarray, states: list) -> None:
        """A decode run of ``streams`` (in rows ``slots``, their caches ``pasts`` long) went through."""
        self.arena.lengths[slots] = pasts + 1
        for array, state in zip(self.fixed, states):
            array[slots] = state
        now = time.monotonic()
        for stream in streams:
            stream.last = now

    def length(self, stream: KvStream) -> int:
        return int(self.arena.lengths[stream.slot]) if stream.slot is not None else stream.length

    def take_slot(self, keep: Collection[int], what: str, length: int = 0) -> int:
        """A free row for ``length`` positions, preempting streams not in ``keep`` if need be."""
        while not self.free or self.budget.over(self.arena.held(), length):
            if not self.preempt(keep):
                rows = self.arena.slots
                raise PoolFullError(
                    f"cannot {what}: all {rows} rows are taken by streams stepping now; close a stream first"
                    if not self.free
                    else f"cannot {what}: the KV budget ({self.budget.bytes} bytes) is full"
                )
        return self.free.pop()

    def place(self, stepping: Collection[int], new: int) -> None:
        """Every stream of ``stepping`` in a row of the arena, with room for ``new`` positions more
        within the budget (moving other streams out)."""
        while self.budget.over(self.arena.held(), new):
            if not self.preempt(stepping):
                raise PoolFullError(
                    f"the step needs {self.arena.held() + new} KV positions; kv_cache_bytes holds "
                    f"{self.budget.positions}"
                )
        for sid in stepping:
            stream = self.streams[sid]
            if stream.slot is None:
                kv, fixed = self.values(stream, copy=False)
                slot = self.take_slot(stepping, f"resume stream {sid}", stream.length)
                self.arena.put(slot, kv)
                self.fixed_put(slot, fixed)
                if isinstance(stream.held, Path):
                    stream.held.unlink(missing_ok=True)
                stream.held, stream.slot = None, slot

    def park(self, sid: int) -> None:
        """Move stream ``sid`` to its file in ``park_dir`` and give its row back."""
        assert self.park_dir is not None
        stream = self.get(sid)
        if isinstance(stream.held, Path):
            return
        path = self.park_dir / f"stream-{sid}.npz"
        self.park_dir.mkdir(parents=True, exist_ok=True)
        write_stream(self.kv, *self.values(stream, copy=False), path)
        if stream.slot is not None:
            stream.length = int(self.arena.lengths[stream.slot])
            self.give_back(stream.slot)
            stream.slot = None
        stream.held = path

    def preempt(self, keep: Collection[int]) -> bool:
        """Move the stream the budget names, of those holding a row and not in ``keep``, out of the
        arena; False: there is none."""
        sid = self.budget.victim(
            (s.last, sid) for sid, s in self.streams.items() if s.slot is not None and sid not in keep
        )
        if sid is None:
            return False
        stream = self.streams[sid]
        if self.park_dir is not None:
            self.park(sid)
        else:
            self.move_out(stream, *self.values(stream))
        self.preempted += 1
        return True

    def move_out(self, stream: KvStream, kv: list[np.ndarray], fixed: list[np.ndarray]) -> None:
        """``stream`` holds ``kv`` and ``fixed`` in host memory from now on, its row given back; its
        next step brings it back (:meth:`place`)."""
        self.drop_held(stream)
        if stream.slot is not None:
            self.give_back(stream.slot)
            stream.slot = None
        stream.held, stream.length = (kv, fixed), kv[0].shape[2]

    def idle(self, seconds: float) -> list[int]:
        """The streams not stepped for ``seconds`` that are not parked already."""
        since = time.monotonic() - seconds
        return [sid for sid, s in self.streams.items() if s.last <= since and not isinstance(s.held, Path)]

    def give_back(self, slot: int) -> None:
        self.arena.release(slot)
        self.fixed_start(slot)
        self.free.append(slot)
        self.free.sort(reverse=True)  # pop() takes the lowest: the streams stay packed

    def fixed_start(self, slot: int) -> None:
        for array in self.fixed:
            array[slot] = 0

    def fixed_put(self, slot: int, values: Sequence[np.ndarray | None]) -> None:
        for array, value in zip(self.fixed, values):
            array[slot] = 0 if value is None else value[0]

    def values(self, stream: KvStream, copy: bool = True) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """A stream's caches and fixed states, wherever they are (``copy=False``: where it holds a
        row, or host memory, the arrays themselves, for a caller that copies them at once)."""
        if stream.slot is not None:
            slot, length = stream.slot, int(self.arena.lengths[stream.slot])
            kv = [a[slot : slot + 1, :, :length] for a in self.arena.arrays]
            fixed = [a[slot : slot + 1] for a in self.fixed]
        elif isinstance(stream.held, Path):
            return read_stream(self.kv, stream.held)
        elif stream.held is None:  # never stepped since it was moved out
            empty = [np.zeros((1, heads, 0, size), np.float32) for heads, size in self.kv.kv_shapes]
            return empty, [np.zeros(f.shape, f.carrier) for f in self.kv.fixed]
        else:
            kv, fixed = stream.held
        return ([a.copy() for a in kv], [a.copy() for a in fixed]) if copy else (kv, fixed)

    def cut(self, sid: int, held: int, length: int) -> int:
        """``length``, checked: a cut of stream ``sid``'s ``held`` positions.

        Raises:
            StateError: past what it holds, or a model whose state is not its KV caches alone.
        """
        if self.fixed or not 0 <= length <= held:
            why = "its state is not KV caches alone" if self.fixed else f"it holds {held} positions"
            raise StateError(f"stream {sid}: cannot cut it to {length} positions: {why}")
        return length

    def trim(self, stream: KvStream, sid: int, length: int) -> None:
        """``stream``'s caches cut to their first ``length`` positions (what lies past them is never
        read again: the next step writes over it)."""
        self.cut(sid, self.length(stream), length)
        if stream.slot is not None:
            self.arena.lengths[stream.slot] = length
        else:
            kv, fixed = self.values(stream, copy=False)
            self.move_out(stream, [a[:, :, :length].copy() for a in kv], fixed)

    def reset(self, stream: KvStream) -> None:
        """``stream`` back at its initial state: empty caches, fixed states at zeros."""
        self.drop_held(stream)
        if stream.slot is not None:
            self.arena.release(stream.slot)
            self.fixed_start(stream.slot)

    def close(self, sid: int) -> None:
        """End stream ``sid``: its row, or what it was moved out to, freed."""
        stream = self.get(sid)
        self.drop_held(stream)
        if stream.slot is not None:
            self.give_back(stream.slot)
        del self.streams[sid]

    def drop_held(self, stream: KvStream) -> None:
        if isinstance(stream.held, Path):
            stream.held.unlink(missing_ok=True)
        stream.held, stream.length = None, 0

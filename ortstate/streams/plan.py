"""A step the pool has run before, run again with nothing decided twice.

The same streams stepping with feeds of the same shapes (the steady case of a server's ticks) make
the same single batch every time: which slots, which bound buffers (:mod:`.bound`), how the rows
are gathered (:class:`~.slots.Rows`). A :class:`Plan` keeps those, keyed by the step's stream ids,
and checks only what can change between steps: that each stream's feeds are the arrays of the
shapes and dtypes planned. Anything else (a feed that does not fit, a failed run) is a miss:
nothing was changed and the pool steps the general way, which finds and reports the culprit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter, itemgetter
from time import perf_counter_ns
from typing import Any

import numpy as np

from ..runtime.pingpong import QUIET
from .bound import Bound
from .layout import Layout, offset_rows
from .slots import SlotStates
from .stats import Recorder

__all__ = ["Plan", "split_rows"]

_ndarray = np.ndarray
_size = attrgetter("size")


class Plan:
    """One batch of streams (``sids``, in the order their feeds come, held in ``slots`` of
    ``states``) with feeds of ``shapes`` (one stream's, per input), run through ``bound``'s buffers
    (``names``: the model's outputs)."""

    def __init__(
        self,
        sids: tuple,
        slots: np.ndarray,
        shapes: Sequence[tuple[int, ...]],
        bound: Bound,
        states: SlotStates,
        layout: Layout,
        names: list[str],
    ) -> None:
        self.sids, self.bound, self.names = sids, bound, names
        self.count = len(sids)
        self.width = len(layout.inputs)
        # per input: its name, bound buffer, one stream's shape and dtype, batch axis
        self.inputs = [
            (s.name, buf, shape, s.dtype, s.axis) for s, buf, shape in zip(layout.inputs, bound.inputs, shapes)
        ]
        self.row_index = {s.name for s in layout.inputs if s.rows}  # offset to each stream's row
        self.sizes = [int(np.prod(shape)) for shape in shapes]  # one stream's, per input
        n_out = len(names)
        self.outputs = bound.outputs[:n_out]
        self.rows = states.rows(slots, bound.states, bound.outputs[n_out:])
        self.axes = [layout.outputs[n] for n in names]
        self.flags = [(states.uninitialised[:, k], buf) for k, buf in bound.flags]

    def run(self, feeds: Mapping[Any, Any], record: Recorder) -> dict[Any, Any] | None:
        """Step the planned streams with ``feeds`` (the step's mapping, its keys ``sids``): their
        outputs, or None where the feeds or the run do not fit (then nothing changed)."""
        if self.count == 1:
            if not self._one(feeds):
                return None
        elif not self._many(feeds):
            return None
        bound, rows = self.bound, self.rows
        start = perf_counter_ns()
        rows.gather()
        for uninitialised, buf in self.flags:
            uninitialised.take(rows.slots, out=buf)
        try:
            bound.run_bound(bound.raw, QUIET)
        except Exception:  # noqa: BLE001 - the general step re-runs it and reports a real error properly
            return None
        outputs = [o.copy() for o in self.outputs]  # the caller's, apart from the bound buffers
        rows.scatter()
        record.run(self.count, (perf_counter_ns() - start) * 1e-9)
        if self.count == 1:
            return {self.sids[0]: dict(zip(self.names, outputs))}
        parts = [split_rows(o, a) for o, a in zip(outputs, self.axes)]
        if len(parts) == 1:  # a dict display: a quarter of dict(zip(...))'s time per stream
            name = self.names[0]
            return {sid: {name: row} for sid, row in zip(self.sids, parts[0])}
        names = self.names
        return {sid: dict(zip(names, row)) for sid, row in zip(self.sids, zip(*parts))}

    def _one(self, feeds: Mapping[Any, Any]) -> bool:
        """Copy one stream's feeds into the bound inputs, if they are what was planned."""
        (given,) = feeds.values()
        if type(given) is not dict or len(given) != self.width:
            return False
        for name, buf, shape, dtype, _ in self.inputs:
            arr = given.get(name)
            if type(arr) is not _ndarray or arr.shape != shape or (arr.dtype is not dtype and arr.dtype != dtype):
                return False
            buf[...] = arr  # np.copyto without its dispatch (see .slots.Rows)
        return True

    def _many(self, feeds: Mapping[Any, Any]) -> bool:
        """Concatenate the streams' feeds into the bound inputs, if each is what was planned.

        The concatenation into the bound buffer checks the rank, every dim but the batch axis, the
        dtype (``casting="no"``) and that the streams' rows add up to the batch; each stream's
        array being at least one stream's size then leaves it exactly one row (cheaper to ask of
        a thousand arrays than their shapes).
        """
        givens = list(feeds.values())
        try:
            if set(map(len, givens)) != {self.width}:
                return False
            for (name, buf, _, _, axis), size in zip(self.inputs, self.sizes):
                column = list(map(itemgetter(name), givens))
                if min(map(_size, column)) < size:
                    return False
                if axis is None:
                    if any(not np.array_equal(c, column[0]) for c in column):
                        return False  # a run shares that value: the general step groups the streams by it
                    np.copyto(buf, column[0], casting="no")
                else:
                    np.concatenate(column, axis=axis, out=buf, casting="no")
                    if name in self.row_index:
                        offset_rows(buf)
        except (TypeError, KeyError, AttributeError, ValueError):  # the general step says what does not fit
            return False
        return True


def split_rows(output: np.ndarray, axis: int) -> list[np.ndarray]:
    """Each stream's part of a batched ``output`` (views with 1 along ``axis``)."""
    return list(np.expand_dims(np.moveaxis(output, axis, 0), axis + 1))

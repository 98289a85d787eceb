"""The pool's variables: one array per variable with every slot's row along its batch axis, which
streams have not stepped since they were opened or reset, and one slot's values as a snapshot.

A slot's values go to and from a file in the format of :mod:`ortstate.runtime.snapshot`, with the
fingerprint of the model the pool was made from: a stream saved from a pool loads into a
``StatefulSession`` of that model and back.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import StateError
from ..runtime import snapshot
from ..runtime.store import StateStore
from .layout import StateSpec

__all__ = ["Rows", "SlotStates"]


class SlotStates:
    """``slots`` streams' variables (carrier dtypes), zeros where a stream starts (see
    ``uninitialised``: a variable whose init the model computes is computed on the stream's first step)."""

    def __init__(self, states: tuple[StateSpec, ...], slots: int, fingerprint: str) -> None:
        self.specs = states
        self.variables = tuple(s.var for s in states)
        self.fingerprint = fingerprint
        self.arrays = [np.zeros(s.shape[: s.axis] + (slots,) + s.shape[s.axis + 1 :], s.carrier) for s in states]
        # uninitialised per (slot, variable): open and reset set it, a step clears it
        self.uninitialised = np.ones((slots, len(states)), bool)
        self._leads = [(slice(None),) * s.axis for s in states]

    @property
    def leads(self) -> list[tuple[slice, ...]]:
        """Each state's index up to its batch axis (``[:, :]`` for axis 2): ``(*lead, rows)`` picks rows."""
        return self._leads

    def check_values(self, values: Sequence[np.ndarray | None]) -> None:
        """Raise StateError unless ``values`` are one per variable, each of one stream's shape (or None)."""
        specs = self.specs
        if len(values) != len(specs) or any(
            v is not None and (not isinstance(v, np.ndarray) or v.shape != s.shape) for v, s in zip(values, specs)
        ):
            raise StateError(
                f"a stream's values are one per variable of the pool ({len(specs)}), of one stream's shape"
            )

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def start(self, slot: int) -> None:
        """Put ``slot`` at the initial state."""
        for a, lead in zip(self.arrays, self._leads):
            a[(*lead, slot)] = 0
        self.uninitialised[slot] = True

    def gather(self, slots: np.ndarray) -> list[np.ndarray]:
        """The batch's state inputs: the rows of ``slots``, in that order (new arrays)."""
        return [np.take(a, slots, axis=s.axis) for a, s in zip(self.arrays, self.specs)]

    def rows(self, slots: np.ndarray, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> Rows:
        """``slots``' rows, for a batch of them stepped again and again (see :class:`Rows`)."""
        return Rows(self, slots, inputs, outputs)

    def scatter(self, slots: np.ndarray, values: Sequence[np.ndarray]) -> None:
        """Write a run's new states back to ``slots``' rows."""
        if len(slots) == 1:  # a basic slice: much cheaper than a fancy index for one row
            slot = int(slots[0])
            rows: Any = slice(slot, slot + 1)
            self.uninitialised[slot] = False
        else:
            rows = slots
            self.uninitialised[slots] = False
        for a, lead, value in zip(self.arrays, self._leads, values):
            a[(*lead, rows)] = value

    # -- one stream's values ----------------------------------------------------------------------
    def save(self, slot: int, path: str | os.PathLike[str]) -> None:
        """Write ``slot``'s variables as a snapshot (a stream's uninitialised ones stay so)."""
        store = StateStore(self.variables)
        for k, (a, lead, spec) in enumerate(zip(self.arrays, self._leads, self.specs)):
            if not self.uninitialised[slot, k]:
                store.set(spec.var.id, a[(*lead, slice(slot, slot + 1))].astype(spec.dtype))
        snapshot.save_state(store, self.variables, path, self.fingerprint)

    def values(self, slot: int) -> list[np.ndarray | None]:
        """``slot``'s values, one stream's each (copies in the variables' dtypes; None: uninitialised),
        as :meth:`read` returns them from a snapshot."""
        return [
            None if self.uninitialised[slot, k] else a[(*lead, slice(slot, slot + 1))].astype(spec.dtype)
            for k, (a, lead, spec) in enumerate(zip(self.arrays, self._leads, self.specs))
        ]

    def read(self, path: str | os.PathLike[str]) -> list[np.ndarray | None]:
        """A snapshot's values, one stream's each (None: uninitialised), checked before any slot
        changes.

        Raises:
            StateError: what :func:`~ortstate.runtime.snapshot.load_state` refuses, or a value that
                is not one stream's (a lone session's batch of several).
        """
        store = StateStore(self.variables)
        snapshot.load_state(store, self.variables, path, self.fingerprint)
        values: list[np.ndarray | None] = []
        for spec in self.specs:
            value = store.committed(spec.var.id)
            if value is not None and value.shape != spec.shape:
                raise StateError(
                    f"{path}: variable '{spec.var.id}' has shape {list(value.shape)}; one stream's is "
                    f"{list(spec.shape)} (a stream is one row along axis {spec.axis})"
                )
            values.append(value)
        return values

    def write(self, slot: int, values: Sequence[np.ndarray | None]) -> None:
        """Put values :meth:`read` returned into ``slot``."""
        self.start(slot)
        for k, (a, lead, value) in enumerate(zip(self.arrays, self._leads, values)):
            if value is not None:
                a[(*lead, slice(slot, slot + 1))] = value
                self.uninitialised[slot, k] = False


class Rows:
    """Some slots' rows of a :class:`SlotStates`, copied into a batch's state ``inputs`` and back
    from its new-state ``outputs`` (buffers of the batch's shape, one per variable) without
    allocating: between views of the arrays where the slots are consecutive (one stream's always
    are; a copy between views is cheaper than a fancy index), else ``take``/fancy assignment along
    the batch axis.

    ``index`` selects the slots' entries of a per-slot array (a slot, a slice or the slots).
    """

    def __init__(
        self, states: SlotStates, slots: np.ndarray, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
    ) -> None:
        self.states, self.slots = states, slots
        first, count = int(slots[0]), len(slots)
        consecutive = bool((slots == np.arange(first, first + count)).all())
        self.index: Any = first if count == 1 else slice(first, first + count) if consecutive else slots
        if consecutive:
            rows = slice(first, first + count)
            views = [a[(*lead, rows)] for a, lead in zip(states.arrays, states.leads)]
            self.pulls = list(zip(inputs, views))
            self.pushes = list(zip(views, outputs))
            self.uninitialised = states.uninitialised[rows]  # a view: its fill() is cheaper than an indexed assignment
        else:
            self.takes = [(a, s.axis, buf) for a, s, buf in zip(states.arrays, states.specs, inputs)]
            self.puts = [(a, (*lead, slots), value) for a, lead, value in zip(states.arrays, states.leads, outputs)]
        self.consecutive = consecutive

    # The copies are slice assignments, not np.copyto: the same copy without its dispatch, which
    # costs more than copying a small stream's state.
    def gather(self) -> None:
        """Copy the rows into the batch's state inputs."""
        if self.consecutive:
            for buf, view in self.pulls:
                buf[...] = view
        else:
            slots = self.slots
            for array, axis, buf in self.takes:
                array.take(slots, axis=axis, out=buf)

    def scatter(self) -> None:
        """Write the batch's new states to the rows; their streams are initialised."""
        if self.consecutive:
            for view, value in self.pushes:
                view[...] = value
            self.uninitialised.fill(False)
        else:
            for array, where, value in self.puts:
                array[where] = value
            self.states.uninitialised[self.slots] = False

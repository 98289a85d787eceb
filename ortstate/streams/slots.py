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

__all__ = ["SlotStates"]


class SlotStates:
    """``slots`` streams' variables (carrier dtypes), zeros where a stream starts (see
    ``fresh``: a variable whose init the model computes is computed on the stream's first step)."""

    def __init__(self, states: tuple[StateSpec, ...], slots: int, fingerprint: str) -> None:
        self.specs = states
        self.variables = tuple(s.var for s in states)
        self.fingerprint = fingerprint
        self.arrays = [np.zeros(s.shape[: s.axis] + (slots,) + s.shape[s.axis + 1 :], s.carrier) for s in states]
        # uninitialised per (slot, variable): open and reset set it, a step clears it
        self.fresh = np.ones((slots, len(states)), bool)
        self._index = [(slice(None),) * s.axis for s in states]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def start(self, slot: int) -> None:
        """Put ``slot`` at the initial state."""
        for a, lead in zip(self.arrays, self._index):
            a[(*lead, slot)] = 0
        self.fresh[slot] = True

    def gather(self, slots: np.ndarray) -> list[np.ndarray]:
        """The batch's state inputs: the rows of ``slots``, in that order (new arrays)."""
        return [np.take(a, slots, axis=s.axis) for a, s in zip(self.arrays, self.specs)]

    def scatter(self, slots: np.ndarray, values: Sequence[np.ndarray]) -> None:
        """Write a run's new states back to ``slots``' rows."""
        if len(slots) == 1:  # a basic slice: much cheaper than a fancy index for one row
            slot = int(slots[0])
            rows: Any = slice(slot, slot + 1)
            self.fresh[slot] = False
        else:
            rows = slots
            self.fresh[slots] = False
        for a, lead, value in zip(self.arrays, self._index, values):
            a[(*lead, rows)] = value

    # -- one stream's values ----------------------------------------------------------------------
    def save(self, slot: int, path: str | os.PathLike[str]) -> None:
        """Write ``slot``'s variables as a snapshot (a stream's uninitialised ones stay so)."""
        store = StateStore(self.variables)
        for k, (a, lead, spec) in enumerate(zip(self.arrays, self._index, self.specs)):
            if not self.fresh[slot, k]:
                store.set(spec.var.id, a[(*lead, slice(slot, slot + 1))].astype(spec.dtype))
        snapshot.save_state(store, self.variables, path, self.fingerprint)

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
        for k, (a, lead, value) in enumerate(zip(self.arrays, self._index, values)):
            if value is not None:
                a[(*lead, slice(slot, slot + 1))] = value
                self.fresh[slot, k] = False

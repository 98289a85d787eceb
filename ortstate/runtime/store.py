"""One request's variables: committed values, the writes a run stages, and errors ops recorded."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_dtypes  # noqa: F401  (makes np.dtype("bfloat16") resolvable)
import numpy as np

from ..errors import RunError, StateError
from ..meta import MAX_STATE_ELEMENTS, VariableMeta, initial_shape, shown_id, spanned_elements
from .reorder import identity_rows, reorder_feed, reordered
from .shape_rule import ShapeRule, show_shape

__all__ = ["StateStore", "VariableGroup"]


class VariableGroup:
    """The variables one fused state op reads or writes, in its order (see
    :func:`ortstate.passes.fuse_state_ops`), with a getter of all their values at once."""

    __slots__ = ("get", "ids")

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = list(ids)
        # ``get(values)``: a tuple of the values of ``ids``, KeyError if one is missing
        self.get: Callable[[dict[str, np.ndarray]], tuple[np.ndarray, ...]] = (
            operator.itemgetter(*self.ids) if len(self.ids) > 1 else lambda values: (values[self.ids[0]],)
        )


class StateStore:
    """One request's variables. Values live in the carrier dtype (what the model exchanges with the
    runtime, see ``VariableMeta.carrier``); users see ``dtype``.

    A run changes the store only through :meth:`commit` (or :meth:`commit_values`), all or nothing;
    everything else (set, reset, load) bumps :attr:`version`, so a runner caching the values in
    buffers of its own knows to re-read them. Not thread-safe by itself: the owning request
    serialises runs and state access.
    """

    def __init__(self, variables: tuple[VariableMeta, ...]) -> None:
        self.meta = {v.id: v for v in variables}
        self._dtype = {v.id: np.dtype(v.dtype) for v in variables}
        self._carrier = {v.id: np.dtype(v.carrier or v.dtype) for v in variables}
        self._rules = {v.id: ShapeRule(v.shape) for v in variables}
        self._uninitialised = {v.id: v.uninitialised_shape for v in variables}
        self._values: dict[str, np.ndarray] = {}
        self._pending: dict[str, np.ndarray] = {}
        self._errors: list[str] = []
        # each input that reorders variables, with the variables it reorders
        by_input: dict[str, list[str]] = {}
        for v in variables:
            if v.reorder:
                by_input.setdefault(v.reorder, []).append(v.id)
        self._reorders = list(by_input.items())
        self._run_order: dict[str, np.ndarray] = {}  # this run's reorder indices, by variable
        self.version = 0
        self.writes = 0  # every change of a value (a run's commit, a swap, a set, reset or load): a runner
        # whose buffers hold the values compares one counter

    # -- what the state ops call during a run (they never raise: see pyops) ---------------------
    def read(self, var_id: str, init: np.ndarray) -> np.ndarray:
        """The committed value, else ``init`` (the model's init value), reordered for this run
        where the variable asks for it (see :meth:`order_run`)."""
        value = self._values.get(var_id)
        value = init if value is None else value
        indices = self._run_order.get(var_id)
        return value if indices is None else reordered(value, indices)

    def read_many(self, group: VariableGroup, inits: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
        """:meth:`read` of several variables at once (a fused ReadValue; ``inits`` may run longer, and
        where it is shorter an uninitialised variable reads zeros of its init shape)."""
        if not self._run_order:
            try:
                return group.get(self._values)  # all initialised: every step but the first
            except KeyError:
                pass
        values, count = self._values, len(inits)
        found = [
            values[i] if i in values else inits[k] if k < count else self._init(i, {}) for k, i in enumerate(group.ids)
        ]
        order = self._run_order
        return (
            [v if (x := order.get(i)) is None else reordered(v, x) for i, v in zip(group.ids, found)]
            if order
            else found
        )

    def reordering(self) -> bool:
        """Whether this run reorders any variable (see :meth:`order_run`)."""
        return bool(self._run_order)

    def order_run(self, feeds: Mapping[str, Any]) -> None:
        """Take this run's reorder indices from ``feeds`` for the variables that have one (see
        ``VariableMeta.reorder``); an uninitialised variable is reordered as its init is read."""
        order = self._run_order
        if order:
            order.clear()
        values = self._values
        for name, var_ids in self._reorders:  # each input checked once for all its variables
            indices = reorder_feed(feeds, name)
            if indices is None:
                continue
            kept = identity_rows(indices)
            for var_id in var_ids:
                value = values.get(var_id)
                if value is None or not value.ndim or value.shape[0] != kept:
                    order[var_id] = indices

    def stage(self, var_id: str, value: np.ndarray) -> None:
        """Keep a value the run writes, for :meth:`commit`."""
        self._pending[var_id] = value

    def stage_many(self, group: VariableGroup, values: list[np.ndarray]) -> None:
        """:meth:`stage` of several variables at once (a fused Assign; ``values`` may run longer)."""
        self._pending.update(zip(group.ids, values))

    def fail(self, message: str) -> None:
        """Record a state op's problem: the commit raises it and changes nothing."""
        self._errors.append(message)

    # -- what a runner calls around a run ---------------------------------------------------------
    def begin(self) -> None:
        """Forget what an earlier (failed or interrupted) run staged."""
        if self._pending or self._errors:
            self._pending.clear()
            self._errors.clear()
        if self._run_order:
            self._run_order.clear()

    def commit(self) -> None:
        """Apply the run's writes, all or none (the run's error is raised, state untouched)."""
        pending, values, rules = self._pending, self._values, self._rules
        if not self._errors and len(pending) == len(self.meta):
            # The hot path: every value typed like the validated one before it (numpy's dtypes of one
            # kind are one object) and shaped like it or as its rule admits (a growing KV cache);
            # anything else goes through the checks below.
            for var_id, value in pending.items():
                previous = values.get(var_id)
                if previous is None or value.dtype is not previous.dtype:
                    break
                if value.shape != previous.shape and not rules[var_id].admits(value.shape):
                    break
            else:
                values.update(pending)
                pending.clear()
                self.writes += 1
                return
        try:
            if self._errors:
                raise RunError(f"run failed inside a state op: {self._errors[0]}; no variable was changed")
            pending, values, carrier, rules = self._pending, self._values, self._carrier, self._rules
            if len(pending) != len(self.meta):
                missing = [v for v in self.meta if v not in pending]
                raise RunError(f"run did not write variable(s) {', '.join(missing)}; no variable was changed")
            for var_id, value in pending.items():
                previous = values.get(var_id)
                # A value shaped like the validated one before it needs no new check (the hot path;
                # numpy's dtypes of one kind are one object); a growing one (a KV cache) gets the
                # compiled check, and the full one only to word the error.
                if previous is None or value.shape != previous.shape or value.dtype is not previous.dtype:
                    if value.dtype != carrier[var_id] or not rules[var_id].admits(value.shape):
                        self._check(var_id, value, carrier[var_id], "the model's Assign wrote")
            values.update(pending)
            self.writes += 1
        finally:
            self._pending.clear()
            self._errors.clear()

    def commit_values(self, var_ids: list[str], values: list[np.ndarray]) -> None:
        """Commit a run's values of ``var_ids`` (every variable), checked as :meth:`commit` does."""
        if self._pending or self._errors or self._run_order:
            self.begin()
        self._pending.update(zip(var_ids, values))
        self.commit()

    def commit_grown(self, var_ids: list[str], values: list[np.ndarray]) -> None:
        """:meth:`commit_values` for a runner whose buffers hold the values: each typed like the value
        before it (numpy's dtypes of one kind are one object) and shaped as its rule admits is taken
        with no more than that check (a KV cache grown in place, every step); else as it says."""
        current, rules = self._values, self._rules
        for var_id, value in zip(var_ids, values):
            previous = current.get(var_id)
            if previous is None or value.dtype is not previous.dtype or not rules[var_id].admits(value.shape):
                self.commit_values(var_ids, values)
                return
        self.commit_lengths(var_ids, values)

    def lengths_admitted(self, var_id: str, shape: Sequence[int], axis: int) -> tuple[int, float] | None:
        """What :meth:`ShapeRule.lengths` says of variable ``var_id``'s rule."""
        return self._rules[var_id].lengths(shape, axis)

    def commit_lengths(self, var_ids: list[str], values: list[np.ndarray]) -> None:
        """Take ``values`` (every variable's) as they are, checked by the caller: each of the
        committed value's dtype and shaped as its rule admits (:meth:`commit_grown` checks each; the
        KV buffers, whose values are their buffers' valid rows, only the length along one axis,
        against :meth:`lengths_admitted`); else as :meth:`commit_values` says."""
        if self._errors or self._pending or self._run_order or len(var_ids) != len(self.meta):
            self.commit_values(var_ids, values)
            return
        self._values.update(zip(var_ids, values))
        self.writes += 1

    def swap(self, buffers: dict[str, np.ndarray]) -> None:
        """Take ``buffers`` as the current values, unchecked and without a version bump: the
        explicit form's fast path, whose buffers hold values of shapes already committed."""
        self._values.update(buffers)
        self.writes += 1

    def committed(self, var_id: str) -> np.ndarray | None:
        """The value the next run reads (carrier dtype, not a copy), None while uninitialised."""
        return self._values.get(var_id)

    def initialized(self, var_id: str) -> bool:
        return var_id in self._values

    def carried(self, var_id: str, feeds: Mapping[str, Any]) -> np.ndarray:
        """The value to feed the model (carrier dtype): committed, else the zero init (of the
        ``init_dims`` the run's ``feeds`` give, where the metadata has them)."""
        value = self._values.get(var_id)
        if value is None:
            value = self._init(var_id, feeds)
        indices = self._run_order.get(var_id)
        return value if indices is None else reordered(value, indices)

    def _init(self, var_id: str, feeds: Mapping[str, Any]) -> np.ndarray:
        try:
            shape = initial_shape(self.meta[var_id], feeds)
        except ValueError as exc:
            raise RunError(f"{exc}; no variable was changed") from None
        return np.zeros(shape, dtype=self._carrier[var_id])

    # -- the state API ------------------------------------------------------------------------
    def get(self, var_id: str) -> np.ndarray:
        """A copy in the variable's dtype; while uninitialised, zeros of the shape OpenVINO shows then
        (``VariableMeta.uninitialised_shape``: the variable's, dynamic dims 0, in most cases)."""
        value = self._values.get(var_id)
        if value is None:
            return np.zeros(self._uninitialised[var_id], dtype=self._dtype[var_id])
        return value.astype(self._dtype[var_id], copy=True)

    def set(self, var_id: str, value: object) -> None:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:  # ragged lists, objects numpy cannot convert
            raise StateError(f"variable {shown_id(var_id)}: cannot set state: not an array ({exc})") from None
        if not arr.dtype.isnative:  # ``>f4`` is float32 too: the model gets this machine's byte order
            arr = arr.astype(arr.dtype.newbyteorder("="))
        self._check(var_id, arr, self._dtype[var_id], "cannot set state:")
        if spanned_elements(arr.shape) > MAX_STATE_ELEMENTS:
            # only an empty value gets here: its other dims would abort the custom-op form
            raise StateError(
                f"variable {shown_id(var_id)}: cannot set state: shape {list(arr.shape)} spans more than "
                f"{MAX_STATE_ELEMENTS} elements"
            )
        # np.array, not np.ascontiguousarray: that one makes a 0-d value (a scalar variable) 1-d.
        self._values[var_id] = np.array(arr, dtype=self._carrier[var_id], order="C", copy=True)
        self.version += 1
        self.writes += 1

    def replace(self, other: StateStore) -> None:
        """Take ``other``'s values wholesale (a store of the same variables, whose values were
        validated by :meth:`set`): a snapshot loads into a new store first, then here."""
        self._values = dict(other._values)
        self.version += 1
        self.writes += 1

    def reset(self, var_id: str | None = None) -> None:
        if var_id is None:
            self._values.clear()
        else:
            self._values.pop(var_id, None)
        self.version += 1
        self.writes += 1

    def _check(self, var_id: str, arr: np.ndarray, dtype: np.dtype, what: str) -> None:
        meta = self.meta[var_id]
        run = what.startswith("the model")
        error = RunError if run else StateError
        # Every RunError says that the run changed nothing; the caller checks before it changes anything.
        tail = "; no variable was changed" if run else ""
        if arr.dtype != dtype:
            raise error(f"variable {shown_id(var_id)}: {what} dtype {arr.dtype}, expected {dtype}{tail}")
        if not self._rules[var_id].admits(arr.shape):
            raise error(
                f"variable {shown_id(var_id)}: {what} shape {list(arr.shape)}, expected {show_shape(meta.shape)}{tail}"
            )

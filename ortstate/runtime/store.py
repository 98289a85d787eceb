"""One request's variables: committed values, the writes a run stages, and errors ops recorded."""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (makes np.dtype("bfloat16") resolvable)
import numpy as np

from ..errors import RunError, StateError
from ..model_meta import MAX_STATE_ELEMENTS, VariableMeta, spanned_elements

__all__ = ["ShapeRule", "StateStore"]


class ShapeRule:
    """Which concrete shapes a metadata partial shape (see ``VariableMeta.shape``) admits, compiled
    once: every state a model writes is checked, and KV caches change shape every step."""

    __slots__ = ("bounds", "rank", "statics")

    def __init__(self, shape: list | None) -> None:
        self.rank = None if shape is None else len(shape)
        self.statics = tuple((i, d) for i, d in enumerate(shape or []) if isinstance(d, int))
        # [lo, hi] dims that restrict anything (``[0, None]`` admits every size)
        self.bounds = tuple(
            (i, d[0], d[1]) for i, d in enumerate(shape or []) if not isinstance(d, int) and (d[0] or d[1] is not None)
        )

    def admits(self, actual: tuple[int, ...]) -> bool:
        if self.rank is None:
            return True
        if len(actual) != self.rank:
            return False
        for i, d in self.statics:
            if actual[i] != d:
                return False
        for i, lo, hi in self.bounds:
            if actual[i] < lo or (hi is not None and actual[i] > hi):
                return False
        return True


def _show(shape: list | None) -> str:
    """A metadata shape as OpenVINO writes it: ``[1,?,2..8]``."""
    if shape is None:
        return "[...]"

    def dim(d: int | list) -> str:
        if isinstance(d, int):
            return str(d)
        lo, hi = d
        return "?" if not lo and hi is None else f"{lo or ''}..{'' if hi is None else hi}"

    return "[" + ",".join(dim(d) for d in shape) + "]"


class StateStore:
    """Values live in the carrier dtype (what the model's state ops exchange); users see ``dtype``.

    Not thread-safe by itself: the owning request serialises runs and state access.
    """

    def __init__(self, variables: tuple[VariableMeta, ...]) -> None:
        self.meta = {v.id: v for v in variables}
        self._dtype = {v.id: np.dtype(v.dtype) for v in variables}
        self._carrier = {v.id: np.dtype(v.carrier or v.dtype) for v in variables}
        self._rules = {v.id: ShapeRule(v.shape) for v in variables}
        self.values: dict[str, np.ndarray] = {}
        self.pending: dict[str, np.ndarray] = {}
        self.errors: list[str] = []
        # Bumped by every change from outside a run (set, reset, load), so a runner caching the
        # values in buffers of its own knows to re-read them.
        self.version = 0

    # -- what the ops and the runner call during a run ------------------------------------------
    def read(self, var_id: str, init: np.ndarray) -> np.ndarray:
        value = self.values.get(var_id)
        return init if value is None else value

    def stage(self, var_id: str, value: np.ndarray) -> None:
        self.pending[var_id] = value

    def fail(self, message: str) -> None:
        self.errors.append(message)

    def begin(self) -> None:
        self.pending.clear()
        self.errors.clear()

    def commit(self) -> None:
        """Apply the run's writes, all or none (the run's error is raised, state untouched)."""
        try:
            if self.errors:
                raise RunError(f"run failed inside a state op: {self.errors[0]}; no variable was changed")
            pending, values, carrier, rules = self.pending, self.values, self._carrier, self._rules
            if len(pending) != len(self.meta):
                missing = [v for v in self.meta if v not in pending]
                raise RunError(f"run did not write variable(s) {', '.join(missing)}; no variable was changed")
            for var_id, value in pending.items():
                previous = values.get(var_id)
                # A value shaped like the validated one before it needs no new check (the hot path);
                # a growing one (a KV cache) gets the compiled check, and the full one only to word
                # the error.
                if previous is None or value.shape != previous.shape or value.dtype != carrier[var_id]:
                    if value.dtype != carrier[var_id] or not rules[var_id].admits(value.shape):
                        self._check(var_id, value, carrier[var_id], "the model's Assign wrote")
            values.update(pending)
        finally:
            self.pending.clear()
            self.errors.clear()

    def initialized(self, var_id: str) -> bool:
        return var_id in self.values

    def carried(self, var_id: str) -> np.ndarray:
        """The value to feed the model (carrier dtype): committed, else the zero init."""
        value = self.values.get(var_id)
        if value is None:
            return np.zeros(self.meta[var_id].init_shape, dtype=self._carrier[var_id])
        return value

    # -- the state API ------------------------------------------------------------------------
    def get(self, var_id: str) -> np.ndarray:
        """A copy in the variable's dtype; zeros (dynamic dims 0) while uninitialised."""
        value = self.values.get(var_id)
        if value is None:
            return np.zeros(self.meta[var_id].init_shape, dtype=self._dtype[var_id])
        return value.astype(self._dtype[var_id], copy=True)

    def set(self, var_id: str, value: object) -> None:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:  # ragged lists, objects numpy cannot convert
            raise StateError(f"variable '{var_id}': cannot set state: not an array ({exc})") from None
        if not arr.dtype.isnative:  # ``>f4`` is float32 too: the model gets this machine's byte order
            arr = arr.astype(arr.dtype.newbyteorder("="))
        self._check(var_id, arr, self._dtype[var_id], "cannot set state:")
        if spanned_elements(arr.shape) > MAX_STATE_ELEMENTS:
            # only an empty value gets here: its other dims would abort the custom-op form
            raise StateError(
                f"variable '{var_id}': cannot set state: shape {list(arr.shape)} spans more than "
                f"{MAX_STATE_ELEMENTS} elements"
            )
        # np.array, not np.ascontiguousarray: that one makes a 0-d value (a scalar variable) 1-d.
        self.values[var_id] = np.array(arr, dtype=self._carrier[var_id], order="C", copy=True)
        self.version += 1

    def replace(self, values: dict[str, np.ndarray]) -> None:
        """Take another store's (validated) values wholesale."""
        self.values = dict(values)
        self.version += 1

    def reset(self, var_id: str | None = None) -> None:
        if var_id is None:
            self.values.clear()
        else:
            self.values.pop(var_id, None)
        self.version += 1

    def _check(self, var_id: str, arr: np.ndarray, dtype: np.dtype, what: str) -> None:
        meta = self.meta[var_id]
        run = what.startswith("the model")
        error = RunError if run else StateError
        # Every RunError says that the run changed nothing; the caller checks before it changes anything.
        tail = "; no variable was changed" if run else ""
        if arr.dtype != dtype:
            raise error(f"variable '{var_id}': {what} dtype {arr.dtype}, expected {dtype}{tail}")
        if not self._rules[var_id].admits(arr.shape):
            raise error(f"variable '{var_id}': {what} shape {list(arr.shape)}, expected {_show(meta.shape)}{tail}")

"""Infer requests: independent state contexts over one ONNX Runtime session."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import RunError, StateError
from ..meta import EXPLICIT, initial_shape
from . import snapshot
from .loaded import LoadedModel
from .pyop_runner import PyOpRunner
from .runners import ORT_FAILED, ExplicitRunner, Runner
from .store import StateStore

__all__ = ["InferRequest", "VariableState"]


class VariableState:
    """One variable of one request, as OpenVINO's ``VariableState``."""

    def __init__(self, var_id: str, store: StateStore, lock: threading.Lock) -> None:
        self._id = var_id
        self._store = store
        self._lock = lock  # the request's: a state is not read or set during its run

    @property
    def name(self) -> str:
        return self._id

    @property
    def state(self) -> np.ndarray:
        """A copy of the variable's value. Uninitialised (before the first run, after a reset), zeros
        of the shape OpenVINO shows then: the variable's, dynamic dims 0 (see docs/api.md)."""
        with self._lock:
            return self._store.get(self._id)

    @state.setter
    def state(self, value: object) -> None:
        with self._lock:
            self._store.set(self._id, value)

    def reset(self) -> None:
        with self._lock:
            self._store.reset(self._id)

    def __repr__(self) -> str:
        return f"VariableState(name={self._id!r})"


class InferRequest:
    """Runs a loaded model with its own variables (``StatefulSession.create_infer_request()``).
    Runs on one request are serialised by a lock."""

    def __init__(self, model: LoadedModel) -> None:
        self._model = model
        self._store = StateStore(model.meta.variables)
        self._lock = threading.Lock()
        self._runner: Runner
        if model.meta.form == EXPLICIT:
            self._runner = ExplicitRunner(model, self._store)
        elif model.meta.variables:
            self._runner = PyOpRunner(model, self._store, self)
        else:
            self._runner = Runner(model, self._store)

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[np.ndarray]:
        """Like ``InferenceSession.run``; variables advance only if the run succeeds."""
        model = self._model
        names = output_names or model.output_names
        model.check_io(names, input_feed)
        with self._lock:
            try:
                return self._runner.run(names, input_feed, run_options)
            except RunError as exc:
                # ONNX Runtime's own failure (not a refusal of ours): say what may have caused it
                empty = self._empty_states(input_feed) if str(exc).startswith(ORT_FAILED) else ""
                if not empty:
                    raise
                raise RunError(f"{exc}; {empty}") from None

    def infer(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """OpenVINO-style: all outputs, by name."""
        names = self._model.output_names
        return dict(zip(names, self.run(names, inputs)))

    def _empty_states(self, feeds: Mapping[str, Any]) -> str:
        """Why a failed run may have failed: variables it read empty, their first value zeros with
        a dim of 0 (a dynamic dim the IR gives no size to, as a dynamic batch of LowLatency2's or
        MakeStateful's zero-initialised states); "" if none."""
        empty = []
        for var in self._model.meta.variables:
            if self._store.initialized(var.id) or var.init != "zeros":
                continue
            try:
                shape = initial_shape(var, feeds)
            except ValueError:
                continue
            if 0 in shape:
                empty.append((var.id, shape))
        if not empty:
            return ""
        names = ", ".join(f"'{v}' {s}" for v, s in empty)
        return (
            f"the model's variables {names} start empty (the IR gives a dynamic dim of theirs no size): set "
            "each one's value before the first step (query_state() and its .state, or load_state(FILE.npz); "
            "ortstate run --state NAME=FILE.npy)"
        )

    # -- state ------------------------------------------------------------------------------------
    def reset_state(self) -> None:
        with self._lock:
            self._store.reset()

    def query_state(self) -> list[VariableState]:
        return [VariableState(v.id, self._store, self._lock) for v in self._model.meta.variables]

    def save_state(self, path: str | os.PathLike[str]) -> None:
        """Write this request's variables to an ``.npz`` snapshot (see :mod:`.snapshot`).

        Raises:
            OutputFileError: ``path`` cannot be written; a previous file there is left as it was.
        """
        with self._lock:
            snapshot.save_state(self._store, self._model.meta.variables, path, self._model.fingerprint)

    def load_state(self, path: str | os.PathLike[str]) -> None:
        """Restore variables from a snapshot of this model (either form; see :mod:`.snapshot`).

        Raises:
            StateError: missing or corrupted file, an older format, or another model's snapshot;
                nothing changes.
        """
        with self._lock:
            snapshot.load_state(self._store, self._model.meta.variables, path, self._model.fingerprint)

    @property
    def bound(self) -> bool:
        """True while this request's runs go through pre-bound buffers: the explicit form's fast
        path (steady shapes, see :mod:`.pingpong`) or the custom-op form's (a steady input
        signature, see :mod:`.pyop_runner`)."""
        return self._runner.bound

    def variable(self, name: str) -> VariableState:
        if name not in self._store.meta:
            raise StateError(f"no variable '{name}' (variables: {', '.join(self._store.meta) or 'none'})")
        return VariableState(name, self._store, self._lock)

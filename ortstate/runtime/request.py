"""Infer requests: independent state contexts over one ONNX Runtime session."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import RunError, StateError
from ..model_meta import EXPLICIT
from . import pyops, snapshot
from .store import StateStore

if TYPE_CHECKING:
    from .session import StatefulSession

__all__ = ["InferRequest", "VariableState"]

_TRUE = np.array(True)
_FALSE = np.array(False)


class VariableState:
    """One variable of one request, as OpenVINO's ``VariableState``."""

    def __init__(self, request: InferRequest, var_id: str) -> None:
        self._request = request
        self._id = var_id

    @property
    def name(self) -> str:
        return self._id

    @property
    def state(self) -> np.ndarray:
        """A copy of the value the next run reads (zeros, dynamic dims 0, while uninitialised)."""
        with self._request._lock:
            return self._request._store.get(self._id)

    @state.setter
    def state(self, value: object) -> None:
        with self._request._lock:
            self._request._store.set(self._id, value)

    def reset(self) -> None:
        with self._request._lock:
            self._request._store.reset(self._id)

    def __repr__(self) -> str:
        return f"VariableState(name={self._id!r})"


class InferRequest:
    """Runs the session with its own variables. Runs on one request are serialised by a lock."""

    def __init__(self, session: StatefulSession) -> None:
        self._session = session
        meta = session._meta
        self._explicit = meta.form == EXPLICIT
        self._store = StateStore(meta.variables)
        self._lock = threading.RLock()
        self._fixed: dict[str, np.ndarray] = {}
        if meta.variables and not self._explicit:
            key = pyops.register_store(self._store)
            self._fixed[meta.request_input or ""] = np.array(key, dtype=np.int64)
            self._finalizer = weakref.finalize(self, pyops.unregister_store, key)
        self._state_outputs = [v.state_output for v in meta.variables if v.state_output]

    # -- running ------------------------------------------------------------------------------
    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[np.ndarray]:
        """Like ``InferenceSession.run``; variables advance only if the run succeeds."""
        session = self._session
        names = list(output_names) if output_names else session._output_names
        session._check_io(names, input_feed)
        with self._lock:
            feeds = dict(input_feed)
            feeds.update(self._fixed)
            store = self._store
            for v in session._meta.variables:
                initialized = store.initialized(v.id)
                if v.init_flag:
                    feeds[v.init_flag] = _FALSE if initialized else _TRUE
                if v.state_input:
                    feeds[v.state_input] = store.carried(v.id)
            store.begin()
            try:
                results = session._ort.run(names + self._state_outputs, feeds, run_options)
            except Exception as exc:  # onnxruntime raises its own exception types
                store.begin()
                raise RunError(f"run failed, no variable was changed: {_first_line(exc)}") from None
            if self._explicit:
                for v, value in zip(session._meta.variables, results[len(names) :]):
                    store.stage(v.id, value)
            store.commit()
            return results[: len(names)]

    def infer(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """OpenVINO-style: all outputs, by name."""
        names = self._session._output_names
        return dict(zip(names, self.run(names, inputs)))

    # -- state ------------------------------------------------------------------------------------
    def reset_state(self) -> None:
        with self._lock:
            self._store.reset()

    def query_state(self) -> list[VariableState]:
        return [VariableState(self, v.id) for v in self._session._meta.variables]

    def save_state(self, path: str | os.PathLike[str]) -> None:
        """Write this request's variables to an ``.npz`` snapshot (see :mod:`.snapshot`)."""
        with self._lock:
            snapshot.save_state(self._store, self._session._meta.variables, path)

    def load_state(self, path: str | os.PathLike[str]) -> None:
        """Restore variables from a snapshot of a model with the same variables (either form).

        Raises:
            StateError: missing or corrupted file, or another model's snapshot; nothing changes.
        """
        with self._lock:
            snapshot.load_state(self._store, self._session._meta.variables, path)

    def variable(self, name: str) -> VariableState:
        if name not in self._store.meta:
            raise StateError(f"no variable '{name}' (variables: {', '.join(self._store.meta) or 'none'})")
        return VariableState(self, name)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for prefix in ("[ONNXRuntimeError] : ",):
        text = text.replace(prefix, "")
    return text.splitlines()[0] if text else type(exc).__name__

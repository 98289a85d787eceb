"""How one run executes: the plain runner (a model without variables) and the explicit form's (the
variables fed as graph inputs and read back as outputs); the custom-op form's is
:mod:`.pyop_runner`. Every runner commits all or nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import RunError
from . import interrupts
from .guards import check_not_empty
from .kv_buffers import KvBuffers, KvMiss, shares_kv
from .loaded import LoadedModel
from .pingpong import PingPong, PingPongMiss
from .store import StateStore

__all__ = ["ORT_FAILED", "ExplicitRunner", "Runner", "feed_dict", "ort_error"]

_TRUE = np.array(True)
_FALSE = np.array(False)


def feed_dict(feeds: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the feeds for ONNX Runtime, which reads an array's raw bytes: arrays in the other
    byte order (``>f4`` here) are converted to this machine's."""
    full = dict(feeds)
    for name, value in full.items():
        if isinstance(value, np.ndarray) and not value.dtype.isnative:
            full[name] = value.astype(value.dtype.newbyteorder("="))
    return full


ORT_FAILED = "run failed, no variable was changed: "  # how a failure of ONNX Runtime's own begins


def ort_error(exc: BaseException) -> RunError:
    """ONNX Runtime's whole reason on one line: its first line often only names the node, the
    following ones say what was wrong (``index: 2 Got: 7 Expected: 8``)."""
    text = " ".join(str(exc).replace("[ONNXRuntimeError] : ", "").split()) or type(exc).__name__
    return RunError(f"{ORT_FAILED}{text}")


class Runner:
    """Runs the model for one request; ``run`` returns the requested outputs."""

    def __init__(self, model: LoadedModel, store: StateStore) -> None:
        self.model = model
        self.store = store
        self.variables = model.meta.variables
        # LoadedModel.check_io has validated the feeds: skip the wrapper's second look.
        self.ort_run = model.fast.run
        self.guards = model.guards  # inputs ONNX Runtime kernels cannot take empty

    @property
    def bound(self) -> bool:
        """True while runs go through pre-bound buffers (a form's fast path)."""
        return False

    def run(self, names: Sequence[str], feeds: Mapping[str, Any], run_options: Any) -> list[np.ndarray]:
        """A model without variables: a plain run."""
        full = feed_dict(feeds)
        if self.guards:
            check_not_empty(full, self.guards)
        try:
            return self.ort_run(names, full, run_options)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ort_error(exc) from None


class ExplicitRunner(Runner):
    """Explicit form: variables go in as graph inputs and come back as outputs.

    Runs take the general path (numpy feeds, ``InferenceSession.run``) until the variables'
    shapes and the input signature stop changing; then a :class:`PingPong` of IOBindings takes
    over and falls back here whenever that no longer holds.
    """

    def __init__(self, model: LoadedModel, store: StateStore) -> None:
        super().__init__(model, store)
        self.all_outputs = model.output_names  # this very list: a run given it fetches every output
        self.fetch = self.all_outputs + [v.state_output or "" for v in self.variables]
        self.ids = [v.id for v in self.variables]
        self.plan = [(v.id, v.init_flag, v.state_input or "") for v in self.variables]
        self.reorders = any(v.reorder for v in self.variables)  # the bound buffers cannot reorder
        self.lengths = {v.id: v.length_input for v in self.variables if v.length_input}
        self.fast: PingPong | None = None
        self.kv = KvBuffers(model, store) if shares_kv(model) else None
        self._previous: tuple | None = None  # the last general run's signature
        # The run whose buffers seed the fast path, once two runs in a row had the same shapes: bound
        # when next needed, not right after the commit, so a Ctrl-C cannot land between a commit
        # and the return. Held only then (never a growing KV cache).
        self._candidate: tuple | None = None

    @property
    def bound(self) -> bool:
        self._settle()
        return self.fast is not None

    def _settle(self) -> None:
        if self._candidate is not None:
            (feeds, results, version), self._candidate = self._candidate, None
            if version == self.store.version:  # no state was set or reset since that run
                try:
                    self.fast = PingPong(self.model, self.store, feeds, results)
                except PingPongMiss:
                    self.fast = None

    def run(self, names: Sequence[str], feeds: Mapping[str, Any], run_options: Any) -> list[np.ndarray]:
        if self._candidate is not None:
            self._settle()
        if self.fast is not None and run_options is None:
            try:
                return self.fast.run(names, feeds)
            except PingPongMiss:
                self.fast = None
        if self.kv is not None:
            # the feeds as given: the KV path binds them in this machine's byte order itself
            if self.guards:
                check_not_empty(feeds, self.guards)
            self.store.order_run(feeds)
            try:
                return self.kv.run(names, feeds, run_options)
            except KvMiss:
                pass
        return self._general(names, feeds, run_options)

    def _general(self, names: Sequence[str], feeds: Mapping[str, Any], run_options: Any) -> list[np.ndarray]:
        store = self.store
        full = feed_dict(feeds)
        store.order_run(full)
        all_initialized = True
        for var_id, flag, state_in in self.plan:
            value = store.committed(var_id)
            if flag:
                full[flag] = _TRUE if value is None else _FALSE
            if value is None:
                all_initialized = False
            full[state_in] = fed = store.carried(var_id, full)
            if var_id in self.lengths:
                full[self.lengths[var_id]] = np.array(fed.shape[2], np.int64)
        if self.guards:
            check_not_empty(full, self.guards)
        try:
            results = self.ort_run(self.fetch, full, run_options)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ort_error(exc) from None
        count = len(self.all_outputs)
        out = results[:count] if names is self.all_outputs else [results[self.all_outputs.index(n)] for n in names]
        # The bound buffers (if any) hold the values from before this run: a run with run_options
        # comes here with the fast path bound, and the next one must not read them.
        self.fast = None
        steady = self._steady(full, results, all_initialized)
        # A Ctrl-C during the run is raised here, before the commit; after it only the commit and
        # the return are left, so a KeyboardInterrupt out of run() means nothing was committed.
        interrupts.checkpoint()
        store.commit_values(self.ids, results[count:])
        self._candidate = (full, results, store.version) if steady else None
        return out

    def _steady(self, feeds: dict[str, Any], results: list[np.ndarray], all_initialized: bool) -> bool:
        """Whether this run and the one before it had the same shapes everywhere (then ping-pong
        buffers take over from the next run on)."""
        states_static = all_initialized and all(
            np.shape(feeds[v.state_input or ""]) == r.shape
            for v, r in zip(self.variables, results[len(self.all_outputs) :])
        )
        if not self.variables or not states_static or self.reorders:
            self._previous = None  # growing states (KV caches) stay on this path: no more work here
            return False
        inputs = tuple((n, np.shape(a), np.asarray(a).dtype) for n, a in feeds.items())
        signature = (inputs, tuple(r.shape for r in results))
        steady = signature == self._previous
        self._previous = signature
        return steady

"""The custom-op form's runner: the model's ReadValue/Assign Python ops call into this request's
store (by the request key the runner feeds), and the run commits what they staged.

A step costs ONNX Runtime's run plus the state ops' two Python calls (fused, see
:func:`ortstate.passes.fuse_state_ops`) and as little else as the guarantees allow. Runs take the
general path (numpy feeds through ``run``) until two runs in a row had the same input signature;
then a :class:`Bound` IOBinding serves them: the feeds are copied into buffers bound once (the
request key and the init flags too), the outputs land in buffers bound once and are copied out. A
run that does not fit it (another signature, ``run_options``, a failing run) takes the general path.

Every run, either path: staged writes of an earlier failed run are dropped first; SIGINT is deferred
while the state ops may run (a ``KeyboardInterrupt`` inside one would abort the process, see
:mod:`.interrupts`); the outputs are copied out before the commit; the commit applies every staged
value, checked, or raises and changes nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from ..errors import RunError
from . import interrupts, pyops
from .guards import check_not_empty
from .loaded import LoadedModel
from .pingpong import bind_output
from .runners import Runner, feed_dict, ort_error
from .store import StateStore

__all__ = ["Bound", "PyOpRunner"]

_TRUE = np.array(True)
_FALSE = np.array(False)
_ndarray = np.ndarray
_copy = np.ndarray.copy
_defer, _resume = interrupts.defer_sigint, interrupts.resume_sigint
# Runs always pass run options: onnxruntime 1.31's own session object runs faster given them than
# given None (it makes default ones per run then; ~10 % of a 20 µs LSTM step). A bound run that
# fails is redone on the general path, which reports the error: ONNX Runtime must not log one for it.
_DEFAULT = ort.RunOptions()
_QUIET = ort.RunOptions()
_QUIET.log_severity_level = 4


class _Miss(Exception):
    """This run does not fit the bound buffers (``failed``: the bound run itself failed): take the
    general path."""

    def __init__(self, failed: bool = False) -> None:
        super().__init__()
        self.failed = failed


class PyOpRunner(Runner):
    """Custom-op form: ReadValue/Assign nodes call into this request's store by its key."""

    def __init__(self, model: LoadedModel, store: StateStore, owner: object) -> None:
        super().__init__(model, store)
        key = pyops.register_store(store)
        self.key = np.array(key, dtype=np.int64)
        self.fixed = {model.meta.request_input or "": self.key}
        self.flags = [(v.id, v.init_flag) for v in self.variables if v.init_flag]
        # A model without outputs is run for its variables: fetch the Assign token the loader added.
        self.token = [model.token] if model.token else []
        self.fast: Bound | None = None
        self._previous: tuple | None = None  # the last general run's input signature
        self._refused: tuple | None = None  # a signature whose bound runs failed
        # what the next run binds (the feeds and outputs of the run that found the signature steady)
        self._candidate: tuple[dict[str, np.ndarray], list[np.ndarray]] | None = None
        weakref.finalize(owner, pyops.unregister_store, key)  # state is freed with its request

    @property
    def bound(self) -> bool:
        self._settle()
        return self.fast is not None

    def _settle(self) -> None:
        """Bind the buffers the last general run found steady (at the start of the next run, not
        right after a commit: a Ctrl-C must not land between a commit and the return)."""
        if self._candidate is not None:
            (feeds, outputs), self._candidate = self._candidate, None
            if all(a.size for a in [*feeds.values(), *outputs]):  # ONNX Runtime binds buffers by pointer
                self.fast = Bound(self, feeds, outputs)

    def run(self, names: Sequence[str], feeds: Mapping[str, Any], run_options: Any) -> list[np.ndarray]:
        if self._candidate is not None:
            self._settle()
        fast = self.fast
        if fast is not None and run_options is None:
            try:
                return fast.run(names, feeds)
            except _Miss as miss:
                self.fast = None
                if miss.failed:
                    # A bound run that fails where the general one succeeds: an output's shape
                    # changed under the same input signature. Bind that signature no more.
                    results = self._general(names, feeds, run_options)
                    self._refused, self._candidate = self._previous, None
                    return results
        return self._general(names, feeds, run_options)

    def _general(self, names: Sequence[str], feeds: Mapping[str, Any], run_options: Any) -> list[np.ndarray]:
        full = feed_dict(feeds)
        if self.guards:
            check_not_empty(full, self.guards)
        signature = tuple((n, np.shape(a), np.asarray(a).dtype) for n, a in full.items())
        full.update(self.fixed)
        store = self.store
        for var_id, flag in self.flags:
            full[flag] = _FALSE if store.initialized(var_id) else _TRUE
        store.begin()
        store.order_run(full)
        handler = _defer()
        error: RunError | None = None
        try:
            results = self.ort_run(names or self.token, full, _DEFAULT if run_options is None else run_options)
        except Exception as exc:  # onnxruntime raises its own exception types
            error = ort_error(exc)
        finally:
            interrupted = _resume(handler)
        # Bound from the next run on when this one had the signature of the one before it (and
        # fetched every output: their buffers are made like these results).
        steady = signature == self._previous != self._refused and names is self.model.output_names
        steady = steady and self.fast is None
        candidate = ({n: np.asarray(full[n]) for n, _, _ in signature}, results) if steady and not error else None
        self._previous = signature
        _finish(store, handler, interrupted, error)
        self._candidate = candidate
        return results if names else []


def _finish(store: StateStore, handler: Any, interrupted: bool, error: Exception | None) -> None:
    """After a run: deliver a SIGINT that arrived during it, else raise its error, else commit; the
    first two change no variable."""
    if interrupted:
        try:
            interrupts.deliver(handler)
        except BaseException:
            store.begin()  # the default handler raised KeyboardInterrupt: commit nothing
            raise
    if error is not None:
        store.begin()
        raise error
    store.commit()


class Bound:
    """One IOBinding of a custom-op request with its buffers: the feeds' (copied in every run), the
    request key's and the init flags' (bound once, flags rewritten when the store changed), the
    outputs' (copied out every run).

    Buffers are kept alive by this object: ONNX Runtime holds only raw pointers to them.
    """

    def __init__(self, runner: PyOpRunner, feeds: dict[str, np.ndarray], outputs: list[np.ndarray]) -> None:
        model = runner.model
        self.store = runner.store
        self.inputs = {name: np.array(value, copy=True, order="C") for name, value in feeds.items()}
        self.flags = [(var_id, np.array(False)) for var_id, _ in runner.flags]
        self.names = model.output_names or runner.token
        self.outputs = [np.empty_like(o, order="C") for o in outputs]
        self.binding, self.raw = model.fast.binding()  # the wrapper keeps the raw binding alive
        for name, arr in self.inputs.items():
            self.binding.bind_cpu_input(name, arr)
        self.binding.bind_cpu_input(model.meta.request_input or "", runner.key)
        for (_, flag), (_, arr) in zip(runner.flags, self.flags):
            self.binding.bind_cpu_input(flag, arr)
        for name, arr in zip(self.names, self.outputs):
            bind_output(self.binding, name, arr)
        self.run_bound = model.fast.run_bound
        self.version = -1  # the store's version the flags were written for
        self.specs = [(n, b, b.shape, b.dtype) for n, b in self.inputs.items()]
        self.all_names = model.output_names
        self.user_outputs = self.outputs[: len(model.output_names)]  # not the token
        self.index = {name: i for i, name in enumerate(self.names)}

    def run(self, names: Sequence[str], feeds: Mapping[str, Any]) -> list[np.ndarray]:
        for name, buf, shape, dtype in self.specs:
            arr = feeds[name]
            if type(arr) is not _ndarray or arr.shape != shape or (arr.dtype is not dtype and arr.dtype != dtype):
                raise _Miss
            buf[...] = arr  # same shape and dtype: a plain copy (faster than np.copyto)
        store = self.store
        if self.flags and store.version != self.version:
            for var_id, arr in self.flags:
                arr[()] = not store.initialized(var_id)
            self.version = store.version
        store.begin()
        store.order_run(feeds)
        handler = _defer()
        try:
            self.run_bound(self.raw, _QUIET)
            # copied before the commit, while SIGINT is still deferred
            if names is self.all_names:
                out = list(map(_copy, self.user_outputs))
            else:
                outputs, index = self.outputs, self.index
                out = [outputs[index[n]].copy() for n in names]
        except Exception:  # noqa: BLE001 - the general path redoes the run and reports its error
            _finish(store, handler, _resume(handler), _Miss(failed=True))
        if handler is not None and _resume(handler):
            _finish(store, handler, True, None)
        else:
            store.commit()
        if self.flags:
            for _, arr in self.flags:
                arr[()] = False  # every variable is written by a run that commits
        return out

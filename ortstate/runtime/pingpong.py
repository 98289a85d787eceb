"""The explicit form's fast path: two IOBindings over two buffer sets, swapped every step.

Run k reads the variables from buffer set k and writes them into set 1-k; the next run swaps.
Inputs are copied into bound buffers and outputs out of them, so a step costs ONNX Runtime's own
run plus a few small copies (the floor the benchmarks compare against). It applies while the
variables keep their shapes and the inputs their shapes and dtypes; anything else raises
:class:`PingPongMiss` and the caller takes the general path.

Buffers are kept alive by this object: ONNX Runtime holds only raw pointers to them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from .interrupts import checkpoint as _checkpoint

if TYPE_CHECKING:
    from .runners import ExplicitRunner

__all__ = ["PingPong", "PingPongMiss", "raw_binding", "raw_session"]

_FALSE = np.array(False)
_copyto = np.copyto
# A fast-path run that fails is retried on the general path, which succeeds (a state whose shape
# follows an input's values) or raises: onnxruntime must not log an error for it either way.
_QUIET = ort.RunOptions()
_QUIET.log_severity_level = 4


def raw_session(session: ort.InferenceSession) -> Any:
    """onnxruntime's own session object under the Python wrapper, whose ``run`` re-validates the
    feeds (~2 µs a run) and whose ``run_with_iobinding`` costs ~30 µs more when given run options.
    The wrapper itself when a future onnxruntime has no such object."""
    return getattr(session, "_sess", session)


def raw_binding(binding: Any) -> Any:
    """The IOBinding object :func:`raw_session`'s ``run_with_iobinding`` takes."""
    return getattr(binding, "_iobinding", binding)


class PingPongMiss(Exception):
    """This run does not fit the bound buffers (or the state changed from outside): go general."""


class PingPong:
    def __init__(self, runner: ExplicitRunner, feeds: Mapping[str, Any], results: list[np.ndarray]) -> None:
        session = runner.session
        self.store = runner.store
        self.ort = session._ort
        user_inputs = [i.name for i in session._inputs]
        self.inputs = {name: np.array(feeds[name], copy=True, order="C") for name in user_inputs}
        self.outputs = {name: np.empty_like(r, order="C") for name, r in zip(runner.all_outputs, results)}
        current = {v.id: np.array(self.store.values[v.id], copy=True, order="C") for v in runner.variables}
        self.sets = [current, {k: np.empty_like(a) for k, a in current.items()}]
        if any(a.size == 0 for a in [*self.outputs.values(), *current.values()]):
            raise PingPongMiss  # ORT cannot bind empty buffers by pointer
        self.bindings = []
        for k in (0, 1):
            binding = self.ort.io_binding()
            for name, arr in self.inputs.items():
                binding.bind_cpu_input(name, arr)
            for v in runner.variables:
                if v.init_flag:
                    binding.bind_cpu_input(v.init_flag, _FALSE)
                binding.bind_cpu_input(v.state_input or "", self.sets[k][v.id])
                _bind_output(binding, v.state_output or "", self.sets[1 - k][v.id])
            for name, arr in self.outputs.items():
                _bind_output(binding, name, arr)
            self.bindings.append(binding)
        self.k = 0
        self.run_bound = raw_session(self.ort).run_with_iobinding
        self.raw_bindings = [raw_binding(b) for b in self.bindings]
        self.store.values.update(current)  # the store reads the live buffer set (no version bump)
        self.version = self.store.version
        # Flattened for the hot path: (name, buffer, shape, dtype) per input.
        self.specs = [(n, b, b.shape, b.dtype) for n, b in self.inputs.items()]
        self.all_names = runner.all_outputs
        self.output_list = list(self.outputs.values())

    def run(self, names: Sequence[str], feeds: Mapping[str, Any]) -> list[np.ndarray]:
        if self.store.version != self.version:
            raise PingPongMiss
        for name, buf, shape, dtype in self.specs:
            arr = feeds[name]
            if type(arr) is not np.ndarray or arr.shape != shape or (arr.dtype is not dtype and arr.dtype != dtype):
                raise PingPongMiss
            _copyto(buf, arr)
        k = self.k
        try:
            self.run_bound(self.raw_bindings[k], _QUIET)
        except Exception:  # noqa: BLE001 - the general path re-runs and reports a real error properly
            raise PingPongMiss from None
        _checkpoint()  # a Ctrl-C during the run is raised here: the next run still reads set k
        self.k = k ^ 1
        self.store.values.update(self.sets[k ^ 1])
        if names is self.all_names:
            return [o.copy() for o in self.output_list]
        outputs = self.outputs
        return [outputs[n].copy() for n in names]


def _bind_output(binding: Any, name: str, arr: np.ndarray) -> None:
    binding.bind_output(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)

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
from typing import Any

import numpy as np
import onnxruntime as ort

from ..meta import VariableMeta
from .interrupts import checkpoint as _checkpoint
from .loaded import LoadedModel
from .store import StateStore

__all__ = ["QUIET", "PingPong", "PingPongMiss", "bind_output"]

_FALSE = np.array(False)
_copyto = np.copyto
# A fast-path run that fails is retried on the general path, which succeeds (a state whose shape
# follows an input's values) or raises: onnxruntime must not log an error for it either way.
QUIET = ort.RunOptions()
QUIET.log_severity_level = 4


class PingPongMiss(Exception):
    """This run does not fit the bound buffers (or the state changed from outside): go general."""


class PingPong:
    """The bound buffers of one request, made from a general run's ``feeds`` and ``results``
    (the model's outputs, in ``model.output_names`` order, then the variables' next values)."""

    def __init__(
        self, model: LoadedModel, store: StateStore, feeds: Mapping[str, Any], results: list[np.ndarray]
    ) -> None:
        self.store = store
        variables: tuple[VariableMeta, ...] = model.meta.variables
        self.inputs = {i.name: np.array(feeds[i.name], copy=True, order="C") for i in model.inputs}
        self.outputs = {name: np.empty_like(r, order="C") for name, r in zip(model.output_names, results)}
        current = {v.id: np.array(store.committed(v.id), copy=True, order="C") for v in variables}
        self.sets = [current, {k: np.empty_like(a) for k, a in current.items()}]
        if any(a.size == 0 for a in [*self.outputs.values(), *current.values()]):
            raise PingPongMiss  # ORT cannot bind empty buffers by pointer
        self.bindings = []  # the wrappers keep the raw bindings (and so the buffers' binding) alive
        self.raw_bindings = []
        for k in (0, 1):
            binding, raw = model.fast.binding()
            for name, arr in self.inputs.items():
                binding.bind_cpu_input(name, arr)
            for v in variables:
                if v.init_flag:
                    binding.bind_cpu_input(v.init_flag, _FALSE)
                binding.bind_cpu_input(v.state_input or "", self.sets[k][v.id])
                bind_output(binding, v.state_output or "", self.sets[1 - k][v.id])
            for name, arr in self.outputs.items():
                bind_output(binding, name, arr)
            self.bindings.append(binding)
            self.raw_bindings.append(raw)
        self.k = 0
        self.probe = variables[0].id  # whose buffer tells which set the store holds
        self.run_bound = model.fast.run_bound
        store.swap(current)  # the store reads the live buffer set (no version bump)
        self.version = store.version
        # Flattened for the hot path: (name, buffer, shape, dtype) per input.
        self.specs = [(n, b, b.shape, b.dtype) for n, b in self.inputs.items()]
        self.all_names = model.output_names
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
        if self.store.committed(self.probe) is not self.sets[k][self.probe]:
            k = self.k = k ^ 1  # a Ctrl-C landed between the last commit and the flip below
        try:
            self.run_bound(self.raw_bindings[k], QUIET)
        except Exception:  # noqa: BLE001 - the general path re-runs and reports a real error properly
            raise PingPongMiss from None
        if names is self.all_names:
            out = [o.copy() for o in self.output_list]
        else:
            outputs = self.outputs
            out = [outputs[n].copy() for n in names]
        # A Ctrl-C during the run is raised here (the next run still reads set k). The commit is the
        # store's swap, one dict update: a Ctrl-C raised as it is called commits nothing, and one
        # raised after it, before the flip of ``self.k``, is caught up by the next run's check.
        _checkpoint()
        self.store.swap(self.sets[k ^ 1])
        self.k = k ^ 1
        return out


def bind_output(binding: ort.IOBinding, name: str, buffer: np.ndarray) -> None:
    """Bind output ``name`` to ``buffer`` (CPU, by pointer: the caller keeps ``buffer`` alive)."""
    binding.bind_output(name, "cpu", 0, buffer.dtype, list(buffer.shape), buffer.ctypes.data)

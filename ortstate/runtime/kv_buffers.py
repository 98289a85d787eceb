"""The explicit form's path for a growing KV cache: each KV variable lives in a buffer with spare
rows along its cache axis, bound as both its state input and its state output, so ONNX Runtime's
fused attention appends a step's rows in place (see :mod:`ortstate.passes.kv_share`). Nothing
copies the cache on a step: not the graph, not the runtime.

The store still holds each variable's value, as a view of the buffer's valid rows: ``query_state``,
snapshots and ``set_state`` see exactly ``[batch, heads, length, size]``. A buffer grows by half
again (at least 64 rows) when a step would not fit: one copy then, amortised O(1) per token. A run
that fails changes no variable: the valid rows are never written, only the spare ones, and the
length moves only at the commit. Whatever this path does not take (a beam reorder that is not the
identity, a variable set from outside, an uninitialised one, a run that does not fit: a batch
above 1 continuing with several rows, or more rows than the spare ones) raises :class:`KvMiss`, and
the caller runs the general path, which handles every case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .interrupts import checkpoint
from .loaded import LoadedModel
from .ort_adapter import FastBinding
from .pingpong import QUIET, bind_output
from .store import StateStore

__all__ = ["KvBuffers", "KvMiss", "shares_kv"]

_AXIS = 2
_MIN_SPARE = 64
_FALSE = np.array(False)


class KvMiss(Exception):
    """This run does not fit the buffers: take the general path."""


def shares_kv(model: LoadedModel) -> bool:
    """Whether ``model`` has variables this path keeps in buffers."""
    return any(v.length_input for v in model.meta.variables)


class KvBuffers:
    """One request's buffers. ``run`` takes the run or raises :class:`KvMiss` having changed nothing.

    A step of a small model is a few tens of microseconds of ONNX Runtime, so the Python around it
    is kept to what changes from one step to the next: the buffers, the length scalars and the
    outputs' order stay bound; each run binds its feeds and fresh outputs through onnxruntime's own
    binding object (:class:`~.ort_adapter.FastBinding`) and reads back only the outputs it returns.
    """

    def __init__(self, model: LoadedModel, store: StateStore) -> None:
        self.model = model
        self.store = store
        variables = model.meta.variables
        self.shared = [v for v in variables if v.length_input]
        self.others = [v for v in variables if not v.length_input]
        self.ids = [v.id for v in self.shared] + [v.id for v in self.others]
        self.buffers: dict[str, np.ndarray] = {}
        self.lengths: dict[str, int] = {}
        self.views: dict[str, np.ndarray] = {}
        self.version = -1
        self.writes = -1  # the store's count of commits when this path last committed
        self.io = FastBinding(model.fast)
        self.binding, self.raw = self.io.binding, self.io.raw
        self.run_bound = model.fast.run_bound
        self.input_names = [i.name for i in model.inputs]
        # Scalars the binding reads and writes in place (bound once): each variable's rows before
        # and after a run.
        # and after a run, one element of one array each: a run sets and reads them all at once.
        self.length_in = np.zeros(len(self.shared), np.int64)
        self.length_out = np.zeros(len(self.shared), np.int64)
        for k, var in enumerate(self.shared):
            self.binding.bind_input(var.length_input or "", "cpu", 0, np.int64, [], self.length_in[k:].ctypes.data)
        self.bound: dict[str, np.ndarray] = {}  # the buffer each variable's input and output is bound to
        self.spare = 0  # the fewest spare rows of any buffer (0: look again)
        self.stale = True  # a buffer placed or the outputs cleared since the buffers were bound
        self.wanted: list[str] | None = None  # the outputs the binding's output list was made for
        self.fresh: list[str] = []  # the outputs each run allocates anew: the wanted, the others' states
        self.fed: list[np.ndarray] = []  # the arrays bound as inputs: alive until the next run binds others

    # -- the buffers -----------------------------------------------------------------------------
    def _current(self) -> bool:
        """Whether the store still holds this path's views (nothing was set, reset or run elsewhere)."""
        store = self.store
        return store.version == self.version and store.writes == self.writes

    def _seed(self) -> None:
        """Copy every shared variable's committed value into a buffer of its own."""
        self.buffers.clear()
        self.views.clear()
        for var in self.shared:
            value = self.store.committed(var.id)
            if value is None or value.ndim != 4:
                raise KvMiss
            self._place(var.id, value, value.shape[_AXIS])
        self.version = self.store.version

    def _place(self, var_id: str, value: np.ndarray, length: int) -> None:
        """A new buffer for ``value``'s first ``length`` rows, with spare rows after them."""
        capacity = length + max(_MIN_SPARE, length // 2)
        shape = list(value.shape)
        shape[_AXIS] = capacity
        buffer = np.zeros(shape, dtype=value.dtype)  # spare rows finite: passes.grouped_decode reads them
        buffer[:, :, :length] = value[:, :, :length]
        self.buffers[var_id] = buffer
        self.lengths[var_id] = length
        self.views[var_id] = buffer[:, :, :length]
        self.spare, self.stale = 0, True

    def _room(self, rows: int) -> None:
        """At least ``rows`` spare rows in every buffer (growing the full ones: copies their values)."""
        if self.spare >= rows:
            return
        for var_id, buffer in self.buffers.items():
            length = self.lengths[var_id]
            if buffer.shape[_AXIS] - length < rows:
                self._place(var_id, buffer, length)
                self.store.swap({var_id: self.views[var_id]})
                self.writes = self.store.writes
        self.spare = min(b.shape[_AXIS] - self.lengths[i] for i, b in self.buffers.items())

    # -- a run -----------------------------------------------------------------------------------
    def _bind_state(self) -> None:
        """(Re)bind each shared buffer as its variable's input and output (by pointer: a run reads and
        writes it where it is) where it is not bound yet: after a seed, a growth, new outputs."""
        if not self.stale:
            return
        binding = self.binding
        for var in self.shared:
            buffer = self.buffers[var.id]
            if self.bound.get(var.id) is buffer:
                continue
            shape = list(buffer.shape)
            binding.bind_input(var.state_input or "", "cpu", 0, buffer.dtype, shape, buffer.ctypes.data)
            bind_output(binding, var.state_output or "", buffer)
            self.bound[var.id] = buffer
        self.stale = False

    def _bind_outputs(self, wanted: Sequence[str]) -> None:
        """Bind the outputs a run of ``wanted`` fetches, in one order kept while ``wanted`` is the same:
        the length scalars (by pointer), the wanted ones and the other variables' (allocated by ONNX
        Runtime each run), then the shared buffers (:meth:`_bind_state`)."""
        if wanted is not self.wanted and wanted != self.wanted:
            self.binding.clear_binding_outputs()
            self.bound.clear()
            self.stale = True
            for k, var in enumerate(self.shared):
                bind_output(self.binding, var.length_output or "", self.length_out[k : k + 1].reshape(()))
            self.wanted = wanted if isinstance(wanted, list) else list(wanted)
            self.fresh = [*wanted, *(v.state_output or "" for v in self.others)]
        for name in self.fresh:
            self.io.bind_fresh_output(name)  # a fresh allocation each run: the result is returned as it is

    def run(self, names: Sequence[str], full: Mapping[str, Any], run_options: Any) -> list[np.ndarray]:
        """Run with ``full`` (the feeds, checked and native; the store's order for this run taken)."""
        store = self.store
        if store.reordering() or (self.others and any(store.committed(v.id) is None for v in self.others)):
            raise KvMiss
        if not self._current():
            self._seed()
        self._room(1)
        self._bind_outputs(names)
        self._bind_state()
        io = self.io
        fed = []
        for name in self.input_names:
            value = full[name]
            if type(value) is not np.ndarray or not value.flags.c_contiguous:
                value = np.ascontiguousarray(value)
            fed.append(value)
            io.bind_array(name, value)
        for var in self.others:
            value = np.ascontiguousarray(store.carried(var.id, full))
            fed.append(value)
            io.bind_array(var.state_input or "", value)
            if var.init_flag:
                io.bind_array(var.init_flag, _FALSE)
        self.fed = fed
        before = [self.lengths[v.id] for v in self.shared]
        self.length_in[:] = before
        try:
            self.run_bound(self.raw, run_options if run_options is not None else QUIET)
        except Exception:  # noqa: BLE001 - the general path runs it again and reports a real error
            raise KvMiss from None
        values = io.outputs()
        # outputs in the order first bound (see _bind_outputs): the lengths, the wanted outputs, the
        # other variables', then the shared buffers
        lengths = self.length_out.tolist()
        for var, old, length in zip(self.shared, before, lengths):
            if not old <= length <= self.buffers[var.id].shape[_AXIS]:
                raise KvMiss
        first, count = len(self.shared), len(self.fresh)
        outputs = [values[i].numpy() for i in range(first, first + count)]
        checkpoint()  # a Ctrl-C during the run lands here: nothing is committed yet
        views = [self.buffers[v.id][:, :, :length] for v, length in zip(self.shared, lengths)]
        store.commit_values(self.ids, [*views, *outputs[len(names) :]])
        for var, view, length in zip(self.shared, views, lengths):
            self.views[var.id], self.lengths[var.id] = view, length
        self.spare -= max(length - old for old, length in zip(before, lengths)) if lengths else 0
        self.version, self.writes = store.version, store.writes
        return outputs[: len(names)]

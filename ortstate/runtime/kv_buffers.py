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
_EMPTY = np.zeros((0, 0, 0, 0), np.float32)


class KvMiss(Exception):
    """This run does not fit the buffers: take the general path."""


def shares_kv(model: LoadedModel) -> bool:
    """Whether ``model`` has variables this path keeps in buffers."""
    return any(v.length_input for v in model.meta.variables)


class KvBuffers:
    """One request's buffers. ``run`` takes the run or raises :class:`KvMiss` having changed nothing.

    A step of a small model is a few tens of microseconds of ONNX Runtime, and each Python step
    around it costs more right after a run than in a loop of its own (the run has taken the
    caches), so the run keeps to what changes from one step to the next: the buffers, the length
    scalars and the outputs' order stay bound; it binds its feeds and a new allocation of its
    outputs through onnxruntime's own binding object (:class:`~.ort_adapter.FastBinding`), reads
    back only the outputs it returns, and keeps the buffers, their lengths and their capacities in
    lists in the variables' order.
    """

    def __init__(self, model: LoadedModel, store: StateStore) -> None:
        self.model = model
        self.store = store
        variables = model.meta.variables
        self.shared = [v for v in variables if v.length_input]
        self.others = [v for v in variables if not v.length_input]
        self.ids = [v.id for v in self.shared] + [v.id for v in self.others]
        count = len(self.shared)
        self.buffers: dict[str, np.ndarray] = {}
        self.lengths: list[int] = [0] * count  # the valid rows of each buffer, in ``shared``'s order
        self.buffer_list: list[np.ndarray] = [_EMPTY] * count
        self.capacities: list[int] = [0] * count
        # the most valid rows each buffer may hold: its capacity, or less where the variable's rule says
        self.tops: list[float] = [0] * count
        self.writes = -1  # the store's count of changes when this path last committed (see StateStore.writes)
        self.io = FastBinding(model.fast)
        self.binding, self.raw = self.io.binding, self.io.raw
        self.run_bound = model.fast.run_bound
        self.input_names = [i.name for i in model.inputs]
        self.fed_names = self.input_names + [v.state_input or "" for v in self.others]  # what a run binds
        # Scalars the binding reads and writes in place (bound once): each variable's rows before
        # and after a run, one element of one array each: a run sets and reads them all at once.
        self.length_in = np.zeros(count, np.int64)
        self.length_out = np.zeros(count, np.int64)
        for k, var in enumerate(self.shared):
            self.binding.bind_input(var.length_input or "", "cpu", 0, np.int64, [], self.length_in[k:].ctypes.data)
        self.wanted: list[str] | None = None  # the outputs the binding's output list was made for
        self.allocated: list[str] = []  # the outputs each run allocates anew: the wanted, the others' states
        self.fed: list[np.ndarray] = []  # the arrays bound as inputs: alive until the next run binds others
        self.spare = 0  # the fewest spare rows of any buffer (0: look again)
        self.stale = True  # a buffer placed or the outputs cleared since the buffers were bound

    # -- the buffers -----------------------------------------------------------------------------
    def _seed(self) -> None:
        """Copy every shared variable's committed value into a buffer of its own."""
        self.buffers.clear()
        for k, var in enumerate(self.shared):
            value = self.store.committed(var.id)
            if value is None or value.ndim != 4:
                raise KvMiss
            self._place(k, value, value.shape[_AXIS])

    def _place(self, k: int, value: np.ndarray, length: int) -> np.ndarray:
        """A new buffer for variable ``k``: ``value``'s first ``length`` rows, spare rows after them;
        returns the view of its valid rows."""
        capacity = length + max(_MIN_SPARE, length // 2)
        shape = list(value.shape)
        shape[_AXIS] = capacity
        buffer = np.zeros(shape, dtype=value.dtype)  # spare rows finite: passes.grouped_decode reads them
        buffer[:, :, :length] = value[:, :, :length]
        var_id = self.shared[k].id
        self.buffers[var_id] = self.buffer_list[k] = buffer
        self.lengths[k], self.capacities[k] = length, capacity
        admitted = self.store.lengths_admitted(var_id, shape, _AXIS)  # None: no length fits (never here)
        self.tops[k] = -1 if admitted is None else min(capacity, admitted[1])
        self.spare, self.stale = 0, True
        return buffer[:, :, :length]

    def _room(self, rows: int) -> None:
        """At least ``rows`` spare rows in every buffer (growing the full ones: copies their values)."""
        for k, (buffer, length, capacity) in enumerate(zip(self.buffer_list, self.lengths, self.capacities)):
            if capacity - length < rows:
                self.store.swap({self.shared[k].id: self._place(k, buffer, length)})
                self.writes = self.store.writes
        self.spare = min(c - n for c, n in zip(self.capacities, self.lengths))

    # -- a run -----------------------------------------------------------------------------------
    def _bind_state(self) -> None:
        """Bind each shared buffer as its variable's input and output (by pointer: a run reads and
        writes it where it is): after a seed, a growth, new outputs."""
        binding = self.binding
        for var, buffer in zip(self.shared, self.buffer_list):
            binding.bind_input(var.state_input or "", "cpu", 0, buffer.dtype, list(buffer.shape), buffer.ctypes.data)
            bind_output(binding, var.state_output or "", buffer)
        self.stale = False

    def _bind_outputs(self, wanted: Sequence[str]) -> None:
        """Bind the outputs runs of ``wanted`` fetch, in one order kept while ``wanted`` is the same:
        the length scalars (by pointer), the wanted ones and the other variables' (allocated by ONNX
        Runtime each run, see :attr:`allocated`), then the shared buffers (:meth:`_bind_state`)."""
        self.binding.clear_binding_outputs()
        self.stale = True
        for k, var in enumerate(self.shared):
            bind_output(self.binding, var.length_output or "", self.length_out[k : k + 1].reshape(()))
        self.wanted = wanted if isinstance(wanted, list) else list(wanted)
        self.allocated = [*wanted, *(v.state_output or "" for v in self.others)]
        for name in self.allocated:  # their place in the outputs' order, before the buffers
            self.io.bind_allocated_output(name)

    def run(self, names: Sequence[str], full: Mapping[str, Any], run_options: Any) -> list[np.ndarray]:
        """Run with ``full`` (the feeds, checked and native; the store's order for this run taken)."""
        store = self.store
        if store.reordering() or (self.others and any(store.committed(v.id) is None for v in self.others)):
            raise KvMiss
        if store.writes != self.writes:  # set, reset, loaded or run elsewhere since this path's commit
            self._seed()
        if self.spare < 1:
            self._room(1)
        if names is not self.wanted and names != self.wanted:
            self._bind_outputs(names)
        if self.stale:
            self._bind_state()
        io = self.io
        bind = io.bind_array
        fed = [full[name] for name in self.input_names]
        for var in self.others:
            fed.append(store.carried(var.id, full))
            if var.init_flag:
                bind(var.init_flag, _FALSE)
        for k, name in enumerate(self.fed_names):
            value = fed[k]
            if type(value) is not np.ndarray or not value.flags.c_contiguous or not value.dtype.isnative:
                value = np.asarray(value)
                value = fed[k] = np.ascontiguousarray(value, value.dtype.newbyteorder("="))
            bind(name, value)
        self.fed = fed
        for name in self.allocated:
            io.bind_allocated_output(name)  # allocated anew each run: the result is returned as it is
        before = self.lengths
        self.length_in[:] = before
        try:
            self.run_bound(self.raw, run_options if run_options is not None else QUIET)
        except Exception:  # noqa: BLE001 - the general path runs it again and reports a real error
            raise KvMiss from None
        lengths = self.length_out.tolist()
        grown = 0
        for old, length, top in zip(before, lengths, self.tops):
            if not old <= length <= top:  # within the buffer, and what the variable's rule admits
                raise KvMiss
            if length - old > grown:
                grown = length - old
        values = io.outputs()  # in the order first bound: the lengths, the allocated ones, the buffers
        first = len(lengths)
        allocated = len(self.allocated)
        outputs = (
            [values[first].numpy()] if allocated == 1 else [values[i].numpy() for i in range(first, first + allocated)]
        )
        checkpoint()  # a Ctrl-C during the run lands here: nothing is committed yet
        views = [buffer[:, :, :length] for buffer, length in zip(self.buffer_list, lengths)]
        count = len(names)
        if self.others:  # their values are the run's new arrays: checked by the store
            store.commit_grown(self.ids, views + outputs[count:])
        else:  # the buffers' dtypes are the values', their lengths checked above
            store.commit_lengths(self.ids, views)
        self.lengths = lengths
        self.spare -= grown
        self.writes = store.writes
        return outputs[:count] if self.others else outputs

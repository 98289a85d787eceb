"""Where one stream sits in a batch: the batch axis of every input, output and variable of a model.

A stream is one row of the model's batch. The pool loads the model's explicit form with every
dimension that could be the batch (a static 1 or a dynamic dim of a graph input or output) made
dynamic, the way OpenVINO's ``set_batch`` re-shapes a model's Parameters; then it follows the
inputs' batch dimension through the graph by trial: two streams (different inputs, different
states) are run alone, then together with each candidate choice of axes, and the choice is taken
whose every output and variable grows by the second stream along one axis and holds, row by row,
what each stream gave alone. A constant that pins the batch (a ``Reshape`` to ``[1, 16]``) makes
every choice fail; the refusal names the layer ONNX Runtime names.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from ..errors import OrtStateError, PassError
from ..model_meta import CUSTOM_OP, ModelMeta, VariableMeta, fresh_name, read_meta, write_meta
from ..passes import to_explicit
from ..runtime import LoadedModel, numpy_dtype, snapshot
from ..runtime.loaded import load_model
from ..runtime.runners import ort_error
from ..runtime.source import read_source

__all__ = ["InputSpec", "Layout", "StateSpec", "find_layout", "load_pool_model", "relax_batch"]

_MAX_TRIALS = 64
_RECURRENT = ("LSTM", "GRU", "RNN")
_LENS = 4  # their sequence_lens input
_SEED = 20


@dataclass(frozen=True)
class InputSpec:
    """A graph input as one stream feeds it: its dims (None: any size; the batch axis is 1)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...]
    axis: int

    def shown(self) -> str:
        return "[" + ",".join("?" if d is None else str(d) for d in self.dims) + "]"


@dataclass(frozen=True)
class StateSpec:
    """A variable as one stream holds it: a fixed ``shape`` with 1 at the batch ``axis``."""

    var: VariableMeta
    axis: int
    shape: tuple[int, ...]
    carrier: np.dtype
    dtype: np.dtype


@dataclass(frozen=True)
class Layout:
    """The batch axes of a model's inputs, outputs (by name) and variables."""

    inputs: tuple[InputSpec, ...]
    outputs: Mapping[str, int]
    states: tuple[StateSpec, ...]


def load_pool_model(
    model: Any, sess_options: ort.SessionOptions | None, providers: Sequence[str] | None
) -> tuple[LoadedModel, Layout, str]:
    """``model`` (what ``StatefulSession`` takes) loaded for batches of streams: its explicit form
    with the batch made dynamic, its layout, and the fingerprint its snapshots carry."""
    source = read_source(model)
    origin = source.origin
    try:
        meta = read_meta(source.model)
    except ValueError as exc:
        raise OrtStateError(f"{origin}: {exc}") from None
    if meta is None or not meta.variables:
        raise OrtStateError(f"{origin}: the model has no variables; a stream pool serves stateful models")
    # The fingerprint of the model as given: a pool's snapshots load into its StatefulSession.
    fingerprint = snapshot.fingerprint(meta.variables, meta.digest or snapshot.model_digest(source.model))
    if meta.form == CUSTOM_OP:
        try:
            meta = to_explicit(source.own(), meta)
        except PassError as exc:
            raise OrtStateError(f"{origin}: a stream pool runs the explicit form: {exc}") from None
        write_meta(source.model, meta)
    dims = relax_batch(source.own(), meta)
    loaded = load_model(source, sess_options, providers, form="explicit")
    return loaded, find_layout(loaded, source.model, dims, origin), fingerprint


def _candidates(dims: Sequence[onnx.TensorShapeProto.Dimension]) -> list[int]:
    return [i for i, d in enumerate(dims) if not d.HasField("dim_value") or d.dim_value == 1]


def relax_batch(model: onnx.ModelProto, meta: ModelMeta) -> dict[str, tuple[int | None, ...]]:
    """Make every graph input's and output's dims that could be the batch (static 1s) dynamic, in
    place; returns the caller-fed inputs' dims as they were (None: dynamic)."""
    graph = model.graph
    flags = {v.init_flag for v in meta.variables if v.init_flag}
    states = {v.state_input for v in meta.variables}
    was: dict[str, tuple[int | None, ...]] = {}
    for n, value in enumerate([*graph.input, *graph.output]):
        if value.name in flags or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if n < len(graph.input) and value.name not in states:
            was[value.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
        for axis in _candidates(dims):
            if dims[axis].HasField("dim_value"):
                dims[axis].dim_param = f"ortstate.pool.{n}.{axis}"
    # Shapes inferred for the static batch would contradict the batched run's.
    del graph.value_info[:]
    _lengths_per_row(graph)
    return was


def _lengths_per_row(graph: onnx.GraphProto) -> None:
    """Expand every LSTM/GRU/RNN ``sequence_lens`` to the rows of its ``X``: a model of batch 1 may
    compute one length for its one row (``Shape(x)[1:2]``); the trial refuses a model where that
    would give one stream's length to another (a length that is not the same for all rows)."""
    taken = {n for node in graph.node for n in (*node.input, *node.output)} | {i.name for i in graph.input}
    rewritten: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type in _RECURRENT and len(node.input) > _LENS and node.input[_LENS]:
            batch = 0 if any(a.name == "layout" and a.i == 1 for a in node.attribute) else 1
            rows, lens = fresh_name(f"{node.name}/pool_rows", taken), fresh_name(f"{node.name}/pool_lens", taken)
            taken |= {rows, lens}
            rewritten.append(helper.make_node("Shape", [node.input[0]], [rows], start=batch, end=batch + 1))
            rewritten.append(helper.make_node("Expand", [node.input[_LENS], rows], [lens]))
            node.input[_LENS] = lens
        rewritten.append(node)
    del graph.node[:]
    graph.node.extend(rewritten)


def _state_spec(var: VariableMeta, axis: int, origin: str) -> StateSpec:
    shape = []
    for i, d in enumerate(var.shape or []):
        if i == axis:
            shape.append(1)
        elif isinstance(d, int):
            shape.append(d)
        else:
            raise OrtStateError(
                f"{origin}: variable '{var.id}': dim {i} is dynamic besides its batch axis {axis}, so a stream's "
                "state has no fixed size (a growing state such as a KV cache); a stream pool needs fixed-size states"
            )
    carrier = np.dtype(var.carrier or var.dtype)
    return StateSpec(var, axis, tuple(shape), carrier, np.dtype(var.dtype))


def _var_candidates(var: VariableMeta, origin: str) -> list[int]:
    if var.shape is None:
        raise OrtStateError(f"{origin}: variable '{var.id}' has a dynamic rank; a stream pool needs fixed-size states")
    if var.reorder or var.length_input:
        raise OrtStateError(f"{origin}: variable '{var.id}' is reordered or kept in a larger buffer (a KV cache)")
    return [i for i, d in enumerate(var.shape) if d == 1 or (isinstance(d, list) and d[0] <= 1)]


def _example(dims: tuple[int | None, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    shape = [1 if d is None else d for d in dims]
    if dtype.kind == "f":
        return rng.normal(0, 0.5, shape).astype(dtype)
    return np.zeros(shape, dtype)  # ids, positions, masks: 0 is valid for every model


def find_layout(
    loaded: LoadedModel, proto: onnx.ModelProto, dims: Mapping[str, tuple[int | None, ...]], origin: str
) -> Layout:
    """The batch axes of ``loaded`` (a model :func:`relax_batch` made), by trial (see the module).

    Raises:
        OrtStateError: an input numpy has no dtype for, a variable without a fixed size per stream,
            or no choice of axes that batches streams exactly (naming the layer that pins it).
    """
    meta = loaded.meta
    rng = np.random.default_rng(_SEED)
    names = [i.name for i in loaded.inputs]
    dtypes = {}
    for i in loaded.inputs:
        dtypes[i.name] = numpy_dtype(i.type)
        if dtypes[i.name] is None:
            raise OrtStateError(f"{origin}: input '{i.name}' of type {i.type} cannot be batched by the pool")
    var_axes = {v.id: _var_candidates(v, origin) for v in meta.variables}
    one = {v.id: [1 if d == 1 or not isinstance(d, int) else d for d in v.shape or []] for v in meta.variables}
    streams = [
        (
            {n: _example(dims[n], dtypes[n], rng) for n in names},
            {v.id: _example(tuple(one[v.id]), np.dtype(v.carrier or v.dtype), rng) for v in meta.variables},
        )
        for _ in range(2)
    ]
    fetch = [*loaded.output_names, *(v.state_output or "" for v in meta.variables)]
    alone = [_run(loaded, fetch, _feeds(meta, *s), proto, origin) for s in streams]
    input_choices = [_candidates_of(dims[n]) for n in names]
    if not all(input_choices):
        bad = names[input_choices.index([])]
        raise OrtStateError(f"{origin}: input '{bad}' has no dim of 1 or dynamic to batch streams along")
    first_error = None
    tried = 0
    for in_axes in itertools.product(*input_choices):
        for axis in sorted({a for axes in var_axes.values() for a in axes}):
            if any(axis not in axes for axes in var_axes.values()) or tried >= _MAX_TRIALS:
                continue
            tried += 1
            feeds = _feeds(
                meta,
                {n: np.concatenate([s[0][n] for s in streams], axis=a) for n, a in zip(names, in_axes)},
                {v: np.concatenate([s[1][v] for s in streams], axis=axis) for v in var_axes},
            )
            try:
                batched = _run(loaded, fetch, feeds, proto, origin)
            except OrtStateError as exc:
                first_error = first_error or exc
                continue
            out_axes = _follows(batched, alone)
            states = out_axes[len(loaded.output_names) :]
            if out_axes and all(a == axis for a in states):
                specs = tuple(_state_spec(v, axis, origin) for v in meta.variables)
                inputs = tuple(
                    InputSpec(n, dtypes[n], tuple(1 if i == a else d for i, d in enumerate(dims[n])), a)
                    for n, a in zip(names, in_axes)
                )
                return Layout(inputs, dict(zip(loaded.output_names, out_axes)), specs)
    why = f": {first_error}" if first_error else ""
    raise OrtStateError(
        f"{origin}: cannot batch streams: no batch axis of the inputs carries through every output and variable, "
        f"row by row as each stream alone{why}"
    )


def _candidates_of(dims: tuple[int | None, ...]) -> list[int]:
    return [i for i, d in enumerate(dims) if d in (None, 1)]


def _feeds(meta: ModelMeta, inputs: dict[str, np.ndarray], states: dict[str, np.ndarray]) -> dict[str, Any]:
    feeds: dict[str, Any] = dict(inputs)
    for v in meta.variables:
        feeds[v.state_input or ""] = states[v.id]
        if v.init_flag:
            feeds[v.init_flag] = np.array(False)
    return feeds


def _run(loaded: LoadedModel, fetch: list[str], feeds: dict[str, Any], proto: onnx.ModelProto, origin: str) -> list:
    try:
        return loaded.fast.run(fetch, feeds, None)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        text = str(ort_error(exc)).removeprefix("run failed, no variable was changed: ")
        raise OrtStateError(f"{_layer_named(proto, text)}{text}") from None


def _follows(batched: list[np.ndarray], alone: list[list[np.ndarray]]) -> list[int]:
    """The axis along which each batched result stacks the lone ones, exactly as they were (up to
    a batched kernel's rounding); [] where one does not."""
    axes = []
    for k, got in enumerate(batched):
        rows = [a[k] for a in alone]
        grown = [i for i in range(got.ndim) if got.ndim == rows[0].ndim and got.shape[i] != rows[0].shape[i]]
        if len(grown) != 1 or rows[0].shape[grown[0]] != 1 or got.shape[grown[0]] != len(rows):
            return []
        axis = grown[0]
        for r, row in enumerate(rows):
            part = np.take(got, [r], axis=axis)
            if part.shape != row.shape or not np.allclose(part, row, rtol=1e-4, atol=1e-5, equal_nan=True):
                return []
        axes.append(axis)
    return axes


def _layer_named(proto: onnx.ModelProto, message: str) -> str:
    """``"layer 'NAME' (id N, Type-v): "`` for the first node ONNX Runtime's message names whose
    doc string records the layer it came from (the converter writes it); else ``""``."""
    named = set(re.findall(r'[Nn]ode ?\(\s*"?([^",)]+)', message)) | set(re.findall(r"Name:'([^']+)'", message))
    if not named:
        return ""
    stack = [proto.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            if node.name in named and node.doc_string.startswith("layer "):
                return f"{node.doc_string}: "
            stack.extend(a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH)
    return ""

"""Where one stream sits in a batch: the batch axis of every input, output and variable of a model.

A stream is one row of the model's batch. The pool loads the model's explicit form with every
dimension that could be the batch (a static 1 or a dynamic dim of a graph input or output) made
dynamic, the way OpenVINO's ``set_batch`` re-shapes a model's Parameters, and its shape arithmetic
folded; :mod:`.batch_axes` follows the inputs' batch dimension through the graph to every output
and variable (and refuses, naming the layer, where a constant pins it). One batched run of two
streams against each alone then checks that the rows stay apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from ..errors import OrtStateError, PassError
from ..meta import CUSTOM_OP, ModelMeta, VariableMeta, fresh_name, read_meta, write_meta
from ..passes import to_explicit
from ..runtime import LoadedModel, numpy_dtype, snapshot
from ..runtime.loaded import layer_behind, load_model
from ..runtime.runners import ORT_FAILED, ort_error
from ..runtime.source import Source, read_source
from .batch_axes import Axes, B, find_axes, lost_dims
from .row_index import offset_rows, row_index_inputs
from .row_init import rows_init
from .shape_math import fold_shape_math
from .unpin import RELAXED, relaxed_sources, unpin_reshapes

__all__ = ["InputSpec", "Layout", "StateSpec", "load_pool_model", "read_pool_source", "relax_batch"]

_RECURRENT = ("LSTM", "GRU", "RNN")
_LENS = 4  # their sequence_lens input
_SEED = 20


@dataclass(frozen=True)
class InputSpec:
    """A graph input as one stream feeds it: its dims (None: any size; the batch axis is 1);
    ``axis`` None: a value the streams of one run share (runs group streams by it); ``rows``: it
    indexes rows of the batch (see :mod:`.row_index`)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...]
    axis: int | None
    rows: bool = False

    def shown(self) -> str:
        return "[" + ",".join("?" if d is None else str(d) for d in self.dims) + "]"


@dataclass(frozen=True)
class StateSpec:
    """A variable as one stream holds it: a fixed ``shape`` with 1 at the batch ``axis``; ``flag``:
    the input telling each row to compute the variable's init (see :mod:`.row_init`), or None."""

    var: VariableMeta
    axis: int
    shape: tuple[int, ...]
    carrier: np.dtype
    dtype: np.dtype
    flag: str | None = None


@dataclass(frozen=True)
class Layout:
    """The batch axes of a model's inputs, outputs (by name) and variables."""

    inputs: tuple[InputSpec, ...]
    outputs: Mapping[str, int]
    states: tuple[StateSpec, ...]


def read_pool_source(model: Any) -> tuple[Source, ModelMeta, str]:
    """``model`` (what ``StatefulSession`` takes) read for a pool: its source, its metadata, and the
    fingerprint of the model as given (a pool's snapshots load into its ``StatefulSession``).

    Raises:
        OrtStateError: an unreadable model or metadata, or a model without variables.
    """
    source = read_source(model)
    try:
        meta = read_meta(source.model)
    except ValueError as exc:
        raise OrtStateError(f"{source.origin}: {exc}") from None
    if meta is None or not meta.variables:
        raise OrtStateError(f"{source.origin}: the model has no variables; a stream pool serves stateful models")
    return source, meta, snapshot.model_fingerprint(source.model, meta)


def load_pool_model(
    model: Any, sess_options: ort.SessionOptions | None, providers: Sequence[str] | None
) -> tuple[LoadedModel, Layout, str]:
    """``model`` (what ``StatefulSession`` takes) loaded for batches of streams: its explicit form
    with the batch made dynamic and each init flag per row, its layout, and the fingerprint its
    snapshots carry.

    Raises:
        OrtStateError: a model without variables, a variable without a fixed size per stream, an
            input without a dim to batch along, a layer that pins the batch (named), or a model
            whose batched rows are not each stream's alone.
    """
    source, meta, fingerprint = read_pool_source(model)
    origin = source.origin
    proto = source.own()
    if meta.form == CUSTOM_OP:
        try:
            meta = to_explicit(proto, meta)
        except PassError as exc:
            raise OrtStateError(f"{origin}: a stream pool runs the explicit form: {exc}") from None
    for var in meta.variables:
        _check_variable(var, origin)
    dims = relax_batch(proto, meta)
    ones = {(name, axis) for name, was in dims.items() for axis, d in enumerate(was) if d == 1}
    unpin_reshapes(proto, relaxed_sources(proto, ones))
    fold_shape_math(proto)
    axes = _find_axes(proto, meta, origin, ones)
    run_meta, flags = rows_init(proto, meta, dict(axes.states), origin)
    write_meta(proto, run_meta)
    loaded = load_model(source, sess_options, providers, form="explicit")
    inputs = []
    state_axes = {v.state_input or "": axes.states[v.id] for v in meta.variables}
    rows = row_index_inputs(proto.graph, state_axes, {n for n, a in axes.inputs.items() if a == 0})
    for name, axis in axes.inputs.items():
        dtype = numpy_dtype(next(i.type for i in loaded.inputs if i.name == name))
        if dtype is None:
            raise OrtStateError(f"{origin}: input '{name}' cannot be batched by the pool (no numpy dtype)")
        shape = tuple(1 if i == axis else d for i, d in enumerate(dims[name]))
        inputs.append(InputSpec(name, dtype, shape, axis, name in rows and len(shape) == 1))
    states = tuple(_state_spec(v, axes.states[v.id], flags.get(v.id), origin) for v in meta.variables)
    model_outputs = set(loaded.output_names)  # the variables' outputs are the states' business
    layout = Layout(tuple(inputs), {n: a for n, a in axes.outputs.items() if n in model_outputs}, states)
    _check_rows(loaded, layout, proto, origin)
    return loaded, layout, fingerprint


def _find_axes(proto: onnx.ModelProto, meta: ModelMeta, origin: str, ones: set[tuple[str, int]]) -> Axes:
    """:func:`find_axes`; where it finds none, once more after unpinning the reshapes that only the
    batch followed through the whole model shows restating their input's shape (a loop's output,
    whose body's state has the batch only once the variables have it too)."""
    try:
        return find_axes(proto, meta, origin)
    except OrtStateError:
        lost = lost_dims(proto, meta, origin)
        batch = [] if lost is None else [(n, a) for n, a in lost[1].items() if (n, a) in ones]
        if not batch or not unpin_reshapes(proto, {B: batch[0]}, lost[0]):
            raise
    fold_shape_math(proto)
    return find_axes(proto, meta, origin)


def relax_batch(model: onnx.ModelProto, meta: ModelMeta) -> dict[str, tuple[int | None, ...]]:
    """Make every graph input's and output's dims that could be the batch (static 1s) dynamic, each
    a symbol of its own, in place; returns the caller-fed inputs' dims as they were (None: dynamic)."""
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
        for axis, d in enumerate(dims):
            if not d.HasField("dim_value") or d.dim_value == 1:
                d.dim_param = f"{RELAXED}{n}.{axis}"
    # Shapes inferred for the static batch would contradict the batched run's.
    del graph.value_info[:]
    _lengths_per_row(graph)
    return was


def _lengths_per_row(graph: onnx.GraphProto) -> None:
    """Expand every LSTM/GRU/RNN ``sequence_lens`` to the rows of its ``X``: a model of batch 1 may
    compute one length for its one row (``Shape(x)[1:2]``); the streams of one run have one length."""
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


def _check_variable(var: VariableMeta, origin: str) -> None:
    if var.shape is None:
        raise OrtStateError(f"{origin}: variable '{var.id}' has a dynamic rank; a stream pool needs fixed-size states")
    if var.reorder or var.length_input:
        raise OrtStateError(f"{origin}: variable '{var.id}' is reordered or kept in a larger buffer (a KV cache)")


def _state_spec(var: VariableMeta, axis: int, flag: str | None, origin: str) -> StateSpec:
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
    return StateSpec(var, axis, tuple(shape), carrier, np.dtype(var.dtype), flag)


def _check_rows(loaded: LoadedModel, layout: Layout, proto: onnx.ModelProto, origin: str) -> None:
    """One batched run of two streams (different inputs and states, the first one starting) against
    each alone: the safety net under the axes the graph gave.

    Raises:
        OrtStateError: a run that fails (naming the layer ONNX Runtime names), or a batched output
            or variable whose rows are not each stream's alone.
    """
    rng = np.random.default_rng(_SEED)
    streams = []
    for k in range(2):
        feeds: dict[str, Any] = {s.name: _example(s.dims, s.dtype, rng) for s in layout.inputs}
        feeds.update({s.name: streams[0][s.name] for s in layout.inputs if k and s.axis is None})
        for spec in layout.states:
            feeds[spec.var.state_input or ""] = _example(spec.shape, spec.carrier, rng)
            if spec.flag:
                feeds[spec.flag] = np.array([k == 0])
        streams.append(feeds)
    fetch = [*loaded.output_names, *(s.var.state_output or "" for s in layout.states)]
    axes = [*(layout.outputs[n] for n in loaded.output_names), *(s.axis for s in layout.states)]
    fed_axes = {s.var.state_input or "": s.axis for s in layout.states}
    fed_axes.update({s.flag: 0 for s in layout.states if s.flag})
    joined = {n: np.concatenate([s[n] for s in streams], fed_axes[n]) for n in fed_axes}
    joined.update({s.name: join_column(s, [f[s.name] for f in streams]) for s in layout.inputs})
    alone = [_run(loaded, fetch, s, proto, origin) for s in streams]
    both = _run(loaded, fetch, joined, proto, origin)
    for name, axis, got, *rows in zip(fetch, axes, both, *alone):
        want = np.concatenate(rows, axis)
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True):
            raise OrtStateError(
                f"{origin}: cannot batch streams: '{name}' of two streams run together is not each one's alone "
                f"along axis {axis} (the model mixes the rows of its batch)"
            )


def join_column(spec: InputSpec, column: list[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """The batched feed of ``spec``'s input from each stream's (``column``; into ``out`` where
    given, of the same dtype): the streams' rows joined along its axis (row indices offset to each
    stream's own row), or the one value they share."""
    if spec.axis is None:
        if out is None:
            return column[0]
        np.copyto(out, column[0], casting="no")
        return out
    joined = np.concatenate(column, axis=spec.axis, out=out, casting="no")
    if spec.rows:
        offset_rows(joined)
    return joined


def _example(dims: tuple[int | None, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    shape = [1 if d is None else d for d in dims]
    if dtype.kind == "f":
        return rng.normal(0, 0.5, shape).astype(dtype)
    return np.zeros(shape, dtype)  # ids, positions, masks: 0 is valid for every model


def _run(loaded: LoadedModel, fetch: list[str], feeds: dict[str, Any], proto: onnx.ModelProto, origin: str) -> list:
    try:
        return loaded.fast.run(fetch, feeds, None)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        text = str(ort_error(exc)).removeprefix(ORT_FAILED)
        raise OrtStateError(f"{origin}: cannot batch streams: {layer_behind(proto, text)}{text}") from None

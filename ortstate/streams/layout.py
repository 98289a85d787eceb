"""Where one stream sits in a batch: the batch axis of every input, output and variable of a model.

A stream is one row of the model's batch. The pool loads the model's explicit form with every
dimension that could be the batch (a static 1 or a dynamic dim of a graph input or output) made
dynamic, the way OpenVINO's ``set_batch`` re-shapes a model's Parameters, and its shape arithmetic
folded; :mod:`ortstate.passes.batchable` makes that form and follows the inputs' batch dimension
through the graph to every output and variable (and refuses, naming the layer, where a constant
pins it). One batched run of two streams against each alone then checks that the rows stay apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ..decoders import InputSpec
from ..errors import OrtStateError, PassError
from ..meta import ModelMeta, VariableMeta, read_meta
from ..passes.batchable import PoolForm, row_index_inputs
from ..passes.pipelines import POOL, PassOptions
from ..runtime import LoadedModel, numpy_dtype, snapshot
from ..runtime.loaded import layer_behind, load_model
from ..runtime.runners import ORT_FAILED, ort_error
from ..runtime.source import Source, read_source

__all__ = ["Layout", "StateSpec", "join_column", "load_pool_model", "offset_rows", "read_pool_source"]

_SEED = 20


@dataclass(frozen=True)
class StateSpec:
    """A variable as one stream holds it: a fixed ``shape`` with 1 at the batch ``axis``; ``flag``:
    the input telling each row to compute the variable's init (see
    :mod:`ortstate.passes.batchable.row_init`), or None."""

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
    try:
        ran = POOL.run(proto, meta, PassOptions(origin))
    except PassError as exc:  # only to_explicit's: the pool form's refusals are OrtStateErrors
        raise OrtStateError(f"{origin}: a stream pool runs the explicit form: {exc}") from None
    form: PoolForm = ran.found("pool_form")
    meta = ran.results["to_explicit"].meta if "to_explicit" in ran.results else meta
    dims, axes = form.dims, form.axes
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
    states = tuple(_state_spec(v, axes.states[v.id], form.flags.get(v.id), origin) for v in meta.variables)
    model_outputs = set(loaded.output_names)  # the variables' outputs are the states' business
    layout = Layout(tuple(inputs), {n: a for n, a in axes.outputs.items() if n in model_outputs}, states)
    _check_rows(loaded, layout, proto, origin)
    return loaded, layout, fingerprint


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


def offset_rows(joined: np.ndarray) -> None:
    """Make, in place, the batched indices ``joined`` (row ``k``: stream ``k``'s index into its own
    batch of one) each stream's own row, or the batch's size where out of range (see
    :mod:`ortstate.passes.batchable.row_index`)."""
    count = len(joined)
    if count < 2:
        return
    own = (joined == 0) | (joined == -1)
    joined[...] = np.where(own, np.arange(count, dtype=joined.dtype), np.asarray(count, joined.dtype))


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

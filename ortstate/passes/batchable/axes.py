"""Where the batch runs through a model: each input's, output's and variable's batch axis, followed
through the graph by shape inference with the batch as a symbol.

The model is the pool's explicit form with every dim that could be the batch (a static 1 or a
dynamic dim of an input, the axis of 1 of a variable) made a symbol of its own, and what it computes
the same way in every run folded (shape arithmetic: split sizes, lengths). For each choice of the
inputs' batch axes, the symbol ``B`` is put on those axes and ONNX shape inference (with data
propagation) carries it through the graph: first with every variable at one row, which shows each
variable's batch axis as the axis of its next value that carries ``B`` (or its one axis of 1); then
with ``B`` on the variables too, which must give every output ``B`` on exactly one axis and every
variable's next value ``B`` on its axis. The first choice that does is taken. Where none does, the
refusal names the layer where the symbol is lost on the way to an output (a ``Reshape`` to a
constant ``[1, 16]``), or where the graph stops telling (its output's shape is not known).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper, shape_inference

from ...errors import OrtStateError
from ...meta import ModelMeta, VariableMeta
from ..walk import nodes, subgraphs
from .legible import legible_kernels, legible_shapes, legible_slices, typed_loops
from .row_init import BATCH_PARAM, rows_init

__all__ = ["B", "Axes", "Dims", "find_axes", "infer_dims", "layer_of", "light_copy", "lost_dims"]

B = BATCH_PARAM
_MAX_CHOICES = 64
_LIGHT = 1024  # initializers above this many bytes are only their shapes to shape inference
_SHAPE_OF = ("Shape", "Size")
_ROUNDS = 8  # shape inferences, each after loop-carried values were typed or found to vary
_CONTROL = {"If": 1, "Loop": 2}  # inputs that steer a node (a condition, a trip count), not its data
Dims = tuple[int | str | None, ...]


@dataclass(frozen=True)
class Axes:
    """The batch axis of each caller-fed input (None: a value the streams of a run share), each
    model output (by name) and each variable (by id)."""

    inputs: Mapping[str, int | None]
    outputs: Mapping[str, int]
    states: Mapping[str, int]


def light_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without its large initializers (declared as inputs instead: shape
    inference needs their shapes only), value infos and output shapes (inference makes them), its
    slices of run-time bounds and ONNX Runtime's own kernels legible to shape inference
    (:mod:`.legible`)."""
    light = onnx.ModelProto()
    light.CopyFrom(model)
    graph = light.graph
    big = [t for t in graph.initializer if len(t.raw_data) > _LIGHT or t.data_location == TensorProto.EXTERNAL]
    for t in big:
        graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        graph.initializer.remove(t)
    del graph.value_info[:]
    for o in graph.output:
        o.type.tensor_type.ClearField("shape")
    legible_slices(light)
    legible_kernels(light)
    return light


@dataclass
class _Inferred:
    """One shape inference: the graph it annotated (None: inference failed) and every value's dims."""

    graph: onnx.GraphProto | None
    shapes: dict[str, Dims]


def find_axes(model: onnx.ModelProto, meta: ModelMeta, origin: str) -> Axes:
    """The batch axes of ``model`` (see the module), whose inputs' and variables' candidate dims are
    dim_params and whose shape arithmetic :func:`fold_shape_math` folded.

    Raises:
        OrtStateError: an input without a dim of 1 or dynamic, or no choice of axes that carries the
            batch through every output (naming the layer where it is lost).
    """
    found = _search(model, meta, origin)
    if isinstance(found, Axes):
        return found
    _, failed, inferred, _ = found
    raise OrtStateError(f"{origin}: cannot batch streams: {_lost(inferred, failed)}")


def lost_dims(model: onnx.ModelProto, meta: ModelMeta, origin: str) -> tuple[dict[str, Dims], Mapping[str, int]] | None:
    """Where :func:`find_axes` finds no axes: every value's dims (the batch the symbol ``B``) with
    the choice of input axes that carried the batch to the most outputs, and that choice; None
    where it finds them (or fails earlier)."""
    try:
        found = _search(model, meta, origin)
    except OrtStateError:
        return None
    return None if isinstance(found, Axes) else (found[2].shapes, found[3])


def _search(
    model: onnx.ModelProto, meta: ModelMeta, origin: str
) -> Axes | tuple[int, str, _Inferred, Mapping[str, int]]:
    """:func:`find_axes`'s axes, else the choice that carried the batch to the most outputs: how
    many, the first output it did not, its inference and its input axes. Inputs that the batch on
    them alone carries to no output (:func:`_shared`) are tried first as values the streams of a run
    share, where another input is batched; then batched as the others."""
    light = light_copy(model)
    states = {v.state_input or "" for v in meta.variables}
    flags = {v.init_flag for v in meta.variables if v.init_flag}
    given = [i for i in model.graph.input if i.name not in states and i.name not in flags]
    choices = []
    for value in given:
        dims = value.type.tensor_type.shape.dim
        axes = [i for i, d in enumerate(dims) if not d.HasField("dim_value") or d.dim_value == 1]
        if not axes:
            raise OrtStateError(f"{origin}: input '{value.name}' has no dim of 1 or dynamic to batch streams along")
        choices.append(axes)
    inner = _read_inside(model.graph)
    read = {i for node in model.graph.node for i in node.input}
    shared = [
        k
        for k, value in enumerate(given)
        if value.name in read
        and value.name not in inner  # read in a subgraph (an init, a loop body): a row's
        and _shared(light, value.name, choices[k], states | {v.name for v in given if v is not value})
    ]
    tried = [[[None] if k in shared else c for k, c in enumerate(choices)]] if 0 < len(shared) < len(given) else []
    best: tuple[int, str, _Inferred, Mapping[str, int | None]] | None = None
    for picked in itertools.chain(*(itertools.islice(itertools.product(*c), _MAX_CHOICES) for c in [*tried, choices])):
        inputs = {v.name: a for v, a in zip(given, picked)}
        first = _infer(light, inputs, {}, states)
        for var_axes in _state_choices(first, meta.variables):
            inferred = _infer(light, inputs, var_axes, states, (meta, origin))
            outputs, failed = _check(inferred, [o.name for o in model.graph.output], meta, var_axes)
            if failed is None:
                return Axes(inputs, outputs, {v.id: var_axes[v.state_input or ""] for v in meta.variables})
            if best is None or len(outputs) > best[0]:
                best = (len(outputs), failed, inferred, inputs)
    assert best is not None
    return best


def _read_inside(graph: onnx.GraphProto) -> set[str]:
    """The values the subgraphs of ``graph``'s nodes read or give back (an outer scope's, among them)."""
    read: set[str] = set()
    for node in nodes(graph):
        for sub in subgraphs(node):
            read.update(o.name for o in sub.output)
            read.update(i for n in sub.node for i in n.input)
    return read


def _shared(light: onnx.ModelProto, name: str, axes: Sequence[int], others: set[str]) -> bool:
    """Whether the batch on input ``name`` alone (on any of its candidate ``axes``; the ``others``
    inputs' candidate dims 1) reaches no output: its value steers the run (a position whose length
    picks prefill or decode, a scatter index) and is not any row's, so the streams of one run must
    share it."""
    for axis in axes:
        inferred = _infer(light, {name: axis}, {}, others)
        if inferred.graph is None or any(_carries(inferred.shapes, o.name) for o in light.graph.output):
            return False
    return True


def _infer(
    light: onnx.ModelProto,
    inputs: Mapping[str, int | None],
    states: Mapping[str, int],
    state_inputs: set[str],
    rows: tuple[ModelMeta, str] | None = None,
) -> _Inferred:
    """Every value's dims with the batch on ``inputs``' axes and ``states``' (state inputs by name;
    those not given: one stream's, every candidate axis 1); with ``rows`` (the metadata and the
    model's origin), each init flag made per row as the pool runs it (:mod:`.row_init`)."""
    model = onnx.ModelProto()
    model.CopyFrom(light)
    for value in model.graph.input:
        axis = inputs.get(value.name, states.get(value.name))
        for i, d in enumerate(value.type.tensor_type.shape.dim):
            if i == axis:
                d.dim_param = B
            elif value.name in state_inputs and d.dim_param:
                d.dim_value = 1
    if rows is not None:
        meta, origin = rows
        rows_init(model, meta, {v.id: states[v.state_input or ""] for v in meta.variables}, origin, declare=True)
    for _ in range(_ROUNDS):
        try:
            graph = shape_inference.infer_shapes(model, data_prop=True).graph
        except Exception:  # noqa: BLE001 - nothing is known then: every output fails
            return _Inferred(None, {})
        shapes: dict[str, Dims] = {}
        _collect(graph, shapes)
        if not typed_loops(model, graph, shapes) and not legible_shapes(model, shapes):
            return _Inferred(graph, shapes)
    return _Inferred(None, {})  # loops nested too deep to settle: nothing is known


def infer_dims(light: onnx.ModelProto) -> dict[str, Dims]:
    """Every value's dims in ``light`` (a :func:`light_copy`) as ONNX shape inference finds them."""
    return _infer(light, {}, {}, set()).shapes


def _collect(graph: onnx.GraphProto, shapes: dict[str, Dims]) -> None:
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor.HasField("shape"):
            shapes[value.name] = tuple(
                d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in tensor.shape.dim
            )
    for node in graph.node:
        for sub in subgraphs(node):
            _collect(sub, shapes)


def _state_choices(first: _Inferred, variables: Sequence[VariableMeta]) -> list[dict[str, int]]:
    """Each variable's batch axis: where its next value carries the batch, else its one axis of 1
    (each of them, where it has several)."""
    per_var = []
    for var in variables:
        out = first.shapes.get(var.state_output or "", ())
        carried = [i for i, d in enumerate(out) if d == B]
        ones = [i for i, d in enumerate(var.shape or []) if d == 1 or (isinstance(d, list) and d[0] <= 1)]
        per_var.append(carried if len(carried) == 1 else ones or [0])
    return [
        {v.state_input or "": a for v, a in zip(variables, axes)}
        for axes in itertools.islice(itertools.product(*per_var), _MAX_CHOICES)
    ]


def _check(
    inferred: _Inferred, names: Sequence[str], meta: ModelMeta, var_axes: Mapping[str, int]
) -> tuple[dict[str, int], str | None]:
    """The outputs that carry the batch on one axis (a variable's on its own axis), {name: axis},
    and the first output that does not."""
    axes = {v.state_output: var_axes[v.state_input or ""] for v in meta.variables}
    found: dict[str, int] = {}
    failed = None
    for name in names:
        carried = [i for i, d in enumerate(inferred.shapes.get(name, ())) if d == B]
        if len(carried) == 1 and axes.get(name, carried[0]) == carried[0]:
            found[name] = carried[0]
        elif failed is None:
            failed = name
    return found, failed


def _lost(inferred: _Inferred, output: str) -> str:
    """Why ``output`` does not carry the batch: the layer that loses it on the way there."""
    shown = _shown(inferred.shapes.get(output))
    if inferred.graph is None:
        return f"shape inference fails on the model, so the batch cannot be followed to output '{output}'"
    node, value = _culprit(inferred.graph, output, inferred.shapes)
    if node is None:
        return f"output '{output}' ({shown}) does not carry the batch of the inputs"
    inner = next((n for sub in subgraphs(node) for n in _losing(sub, inferred.shapes)), None)
    where = layer_of(node) + (f" (inside it {layer_of(inner)})" if inner is not None else "")
    return (
        f"the batch of the inputs is lost at {where}: its output '{value}' is {_shown(inferred.shapes.get(value))} "
        f"on the way to output '{output}' ({shown}); a constant pins the batch there or its shape is not known"
    )


def _carries(shapes: dict[str, Dims], name: str) -> bool:
    return B in shapes.get(name, ())


def _culprit(graph: onnx.GraphProto, output: str, shapes: dict[str, Dims]) -> tuple[onnx.NodeProto | None, str]:
    """The first node, walking back from ``output``, that reads the batch and writes a value without it."""
    made_by = {o: node for node in graph.node for o in node.output if o}
    seen: set[str] = set()
    stack = [output]
    while stack:
        value = stack.pop()
        node = made_by.get(value)
        if node is None or value in seen or node.op_type in _SHAPE_OF:
            continue  # a shape never carries the batch as a dim: not where it is lost
        seen.add(value)
        data = [i for i in node.input[_CONTROL.get(node.op_type, 0) :] if i]
        if any(_carries(shapes, i) for i in data):
            return node, value
        stack.extend(reversed(data))
    return None, output


def _losing(graph: onnx.GraphProto, shapes: dict[str, Dims]) -> list[onnx.NodeProto]:
    """The nodes of a subgraph that read the batch and write values without it."""
    return [
        n
        for n in graph.node
        if any(_carries(shapes, i) for i in n.input if i)
        and not any(_carries(shapes, o) for o in n.output if o)
        and n.op_type not in _SHAPE_OF
    ]


def layer_of(node: onnx.NodeProto) -> str:
    """The IR layer a node came from, as the converter recorded it, else the node itself."""
    if node.doc_string.startswith("layer "):
        return node.doc_string
    return f"node '{node.name}' ({node.op_type})"


def _shown(dims: Dims | None) -> str:
    if dims is None:
        return "of unknown shape"
    return "[" + ", ".join("B" if d == B else "?" if d is None or isinstance(d, str) else str(d) for d in dims) + "]"

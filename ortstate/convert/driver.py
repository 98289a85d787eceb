"""The conversion driver: walk the IR in topological order and write one ONNX model."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from ..errors import ConversionError, OrtStateError, UnsupportedOpsError
from ..ir import Graph, Layer, parse_partial_shape, read_ir
from ..model_meta import CUSTOM_OP, EXPLICIT, ModelMeta, write_meta
from . import ops  # noqa: F401  (registers the translators)
from .builder import GraphBuilder, prune
from .context import OPSET, Context, ConvertOptions
from .dtypes import numpy_type, onnx_type
from .external import Array, inline, save_model
from .folding import constant_value, feeds_only_folds
from .loop_state import BodyScope, MainScope
from .ops.compressed import MS_DOMAIN, float_weight
from .registry import lookup
from .state import CONTRIB_DOMAIN, StateWriter, collect_variables, plan_inits
from .weights import FloatWeight, plan_weights, weight_source
from .weights_report import EXPANDED, write_report

__all__ = ["Built", "build", "convert", "convert_graph", "unsupported_ops"]

_STRUCTURAL = frozenset({"Parameter", "Result", "ReadValue", "Assign"})
# Ops whose bf16 outputs are already bf16-exact (they move or round values themselves).
_EXACT_BF16 = frozenset(
    {
        "Const",
        "Convert",
        "Concat",
        "Gather",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "Slice",
        "StridedSlice",
        "Split",
        "VariadicSplit",
        "Broadcast",
        "Select",
        "ShapeOf",
    }
)
ONNX_IR_VERSION = 10  # onnx writes 14 by default; onnxruntime 1.31 reads at most 13


def convert(
    xml: str | os.PathLike[str],
    onnx_path: str | os.PathLike[str] | None = None,
    *,
    explicit_state: bool = False,
    bin_path: str | os.PathLike[str] | None = None,
    int8_activations: bool = False,
) -> onnx.ModelProto:
    """Convert an OpenVINO IR to ONNX; write it to ``onnx_path`` when given.

    Args:
        xml: the IR's ``.xml``; its ``.bin`` is read from beside it unless ``bin_path`` is given.
        onnx_path: where to save the model. Above 64 MB of weights they go to ``PATH.data`` beside
            it (streamed from the ``.bin``), and the model returned refers to that file instead of
            holding them: open the path with ``StatefulSession``, or load them with
            ``onnx.load_external_data_for_model``.
        explicit_state: make every variable a graph input/output pair (no custom ops) instead of
            ReadValue/Assign custom ops.
        int8_activations: compressed weights compute on int8-quantized activations, as
            OpenVINO's default CPU config does: faster, but logits move ~1e-2 from the exact
            (``INFERENCE_PRECISION_HINT=f32``, no dynamic quantization) results.

    Raises:
        IRError, UnsupportedOpsError, ConversionError, StateError (all ``OrtStateError``).
    """
    graph = read_ir(xml, bin_path)
    built = build(graph, explicit_state=explicit_state, options=ConvertOptions(int8_activations))
    if onnx_path is None:
        inline(built.model.graph, built.arrays)
    else:
        save_model(built.model, built.arrays, onnx_path)
    return built.model


def unsupported_ops(graph: Graph) -> dict[str, list[str]]:
    """``{"Type-N": [layer descriptions]}`` for every layer no translator handles (bodies too)."""
    missing: dict[str, list[str]] = {}

    def visit(g: Graph) -> None:
        for layer in g.layers.values():
            if layer.type not in _STRUCTURAL and lookup(layer.type, layer.op_version) is None:
                missing.setdefault(layer.op_name, []).append(f"'{layer.name}' id {layer.id}")
            if layer.body is not None:
                visit(layer.body)

    visit(graph)
    return missing


@dataclass
class Built:
    """A converted model whose large initializers are stubs for ``arrays`` (see ``external``)."""

    model: onnx.ModelProto
    arrays: dict[str, Array]


def convert_graph(graph: Graph, *, explicit_state: bool = False) -> onnx.ModelProto:
    """Convert a graph read by :func:`ortstate.ir.read_ir` (weights held in the model)."""
    built = build(graph, explicit_state=explicit_state)
    inline(built.model.graph, built.arrays)
    return built.model


def build(graph: Graph, *, explicit_state: bool = False, options: ConvertOptions | None = None) -> Built:
    """Convert ``graph``, leaving its large initializers out of the protobuf (nothing is copied)."""
    missing = unsupported_ops(graph)
    if missing:
        raise UnsupportedOpsError(missing, graph.source)
    variables = collect_variables(graph)
    plan_inits(graph, variables, explicit_state)

    b = GraphBuilder(graph.name or "ortstate", keep_large=True)
    values: dict[tuple[int, int], str] = {}
    _add_inputs(graph, b, values)
    _reserve_outputs(graph, b)  # the model's own names win over every name made below
    state = StateWriter(graph, variables, b, explicit_state)
    ctx = Context(graph, b, MainScope(state), options)

    def value_of(layer: Layer, index: int) -> str:
        return _value(graph, values, layer, index)

    def translate(layers: list[Layer], builder: GraphBuilder) -> None:
        saved, ctx.b = ctx.b, builder
        try:
            for layer in layers:
                _translate(layer, ctx, values, value_of)
        finally:
            ctx.b = saved

    skipped = state.skipped_layers()
    for layer in graph.topological():
        if layer.id in skipped or layer.type in ("Parameter", "Result"):
            continue
        first = len(b.nodes)
        if layer.type == "ReadValue":
            values[(layer.id, layer.outputs[0].id)] = state.read(layer, value_of, translate)
        elif layer.type == "Assign":
            out = state.assign(layer, value_of(layer, 0))
            for port in layer.outputs:
                values[(layer.id, port.id)] = out
        else:
            _translate(layer, ctx, values, value_of)
        _tag(b.nodes[first:], layer)
    _add_outputs(graph, b, value_of)
    state.finish()

    opsets = [helper.make_opsetid("", OPSET)]
    for domain in (CONTRIB_DOMAIN, MS_DOMAIN):
        if domain in b.domains:
            opsets.append(helper.make_opsetid(domain, 1))
    graph_proto = b.graph()
    prune(graph_proto, frozenset({CONTRIB_DOMAIN}))
    model = helper.make_model(graph_proto, opset_imports=opsets, producer_name="ortstate", ir_version=ONNX_IR_VERSION)
    meta = ModelMeta(
        form=EXPLICIT if explicit_state else CUSTOM_OP,
        variables=tuple(state.meta[v.id] for v in variables),
        request_input=state.request_input,
        source=Path(graph.source).name,
        digest=graph.digest,
    )
    write_meta(model, meta)
    kept = {t.name for t in graph_proto.initializer}
    write_report(model, ctx.weights, graph_proto)
    return Built(model, {name: value for name, value in b.large.items() if name in kept})


def translate_body(
    body: Graph,
    builder: GraphBuilder,
    params: dict[int, str],
    scope: BodyScope | None = None,
    options: ConvertOptions | None = None,
) -> dict[int, str]:
    """Translate a loop body (see :meth:`Context.translate_body`)."""
    values: dict[tuple[int, int], str] = {}
    ctx = Context(body, builder, scope, options)

    def value_of(layer: Layer, index: int) -> str:
        return _value(body, values, layer, index)

    for layer in body.topological():
        if layer.type == "Parameter":
            if layer.id not in params:
                raise ConversionError(f"{body.source}: body {layer.describe()} is not connected by the port map")
            values[(layer.id, layer.outputs[0].id)] = params[layer.id]
        elif layer.type in ("ReadValue", "Assign"):
            if scope is None:  # the loop translator gives every body with variables a scope
                raise ConversionError(f"{body.source}: {layer.describe()}: a variable outside any loop's scope")
            builder.hint = layer.name
            if layer.type == "ReadValue":
                init = value_of(layer, 0) if layer.inputs else None
                values[(layer.id, layer.outputs[0].id)] = scope.read(layer, init)
            else:
                scope.assign(layer, value_of(layer, 0))
                for port in layer.outputs:
                    values[(layer.id, port.id)] = value_of(layer, 0)
        elif layer.type != "Result":
            _translate(layer, ctx, values, value_of)
    return {layer.id: value_of(layer, 0) for layer in body.results}


def _translate(layer: Layer, ctx: Context, values: dict[tuple[int, int], str], value_of) -> None:  # noqa: ANN001
    plan = plan_weights(ctx.graph)
    if layer.id in plan.skipped:
        if layer.id in plan.weights:  # read compressed by every consumer: no value of its own
            values[(layer.id, layer.outputs[0].id)] = f"ortstate.compressed:{layer.name}"
        return
    weight = plan.weights.get(layer.id)
    if isinstance(weight, FloatWeight):
        ctx.b.hint = layer.name
        values[(layer.id, layer.outputs[0].id)] = float_weight(ctx, weight)[1]
        return
    consumers = [dst for i in range(len(layer.outputs)) for dst, _ in ctx.graph.consumers(layer, i)]
    if not any(dst.id in plan.weights for dst in consumers) and feeds_only_folds(ctx.graph, layer):
        return  # folded into its consumers' constant
    _check_shape_constants(ctx.graph, layer)
    ctx.b.hint = layer.name
    folded = constant_value(ctx.graph, layer) if layer.type != "Const" else None
    if folded is not None:
        dtype = numpy_type(onnx_type(layer.outputs[0].element_type, f"{ctx.graph.source}: {layer.describe()}"))
        name = ctx.b.const(folded.astype(dtype, copy=False), hint=layer.name)
        values[(layer.id, layer.outputs[0].id)] = name
        source = weight_source(ctx.graph, layer) if folded.size >= 1024 else ""
        if source and set(source.split("+")) - {"f32", "f64"}:
            ctx.record_weight(layer.name, source, EXPANDED, [name])
        return
    fn = lookup(layer.type, layer.op_version)
    assert fn is not None  # unsupported_ops() ran first
    node = ctx.node(layer, [value_of(layer, i) for i in range(len(layer.inputs))])
    first = len(ctx.b.nodes)
    try:
        outs = fn(node, ctx)
    except OrtStateError:
        raise
    except (IndexError, KeyError, ValueError, TypeError, ArithmeticError) as exc:
        # Translators validate what real IRs get wrong; a layer damaged some other way (too few
        # inputs, an axis far out of range, a junk constant) must still fail as this layer's error.
        raise node.error(f"cannot translate the layer as written ({type(exc).__name__}: {exc})") from exc
    if len(outs) != len(layer.outputs):
        raise ConversionError(f"{node.where}: translator produced {len(outs)} outputs, expected {len(layer.outputs)}")
    for port, name in zip(layer.outputs, outs):
        if port.element_type is not None and port.element_type.name == "bf16" and layer.type not in _EXACT_BF16:
            # bf16 travels as f32 (see dtypes): round each result as OpenVINO's bf16 math does.
            name = ctx.b.op("Cast", [ctx.b.op("Cast", [name], {"to": TensorProto.BFLOAT16})], {"to": TensorProto.FLOAT})
        values[(layer.id, port.id)] = name
    _tag(ctx.b.nodes[first:], layer)


def _tag(nodes: list[onnx.NodeProto], layer: Layer) -> None:
    """Record the IR layer behind each node, so the runtime can name it when onnxruntime refuses one."""
    for node in nodes:
        node.doc_string = node.doc_string or layer.describe()


def _value(graph: Graph, values: dict[tuple[int, int], str], layer: Layer, index: int) -> str:
    """The ONNX value on ``layer``'s input ``index``."""
    src, port = graph.producer(layer, index)
    try:
        return values[(src.id, port.id)]
    except KeyError:  # only a damaged IR feeds a layer from one that yields nothing (a Result, say)
        raise ConversionError(
            f"{graph.source}: {layer.describe()}: input {index} comes from {src.describe()}, which has no value"
        ) from None


def _check_shape_constants(graph: Graph, layer: Layer) -> None:
    """Refuse a constant dim no tensor can have in a shape input (Broadcast's target, Reshape's shape...).

    Such a dim leaves only empty tensors, and an empty tensor whose other dims multiply past 2**63
    aborts the process when it reaches a custom op (onnxruntime-extensions builds the numpy array in
    C++), e.g. a KV-cache init ``Broadcast(0, Concat(batch, HEADS, 0, HEAD_DIM))`` with a junk HEADS.
    """
    index = _SHAPE_INPUTS.get(layer.type)
    if index is None or index >= len(layer.inputs):
        return
    stack, seen = [graph.producer(layer, index)[0]], set()
    while stack:  # back through the ops that carry shape values unchanged
        src = stack.pop()
        if src.id in seen:
            continue
        seen.add(src.id)
        if src.type == "Const":
            value = graph.constant(src)
            if value.dtype.kind in "iu" and value.size and int(value.max()) > _MAX_DIM:
                raise ConversionError(
                    f"{graph.source}: {layer.describe()}: input {index} takes dim {int(value.max())} from "
                    f"layer '{src.name}' (id {src.id}); no tensor can have a dim above {_MAX_DIM}"
                )
        elif src.type in _SHAPE_CARRIERS:
            carried = _SHAPE_CARRIERS[src.type] or range(len(src.inputs))
            stack.extend(graph.producer(src, i)[0] for i in carried if i < len(src.inputs))


_SHAPE_INPUTS = {"Broadcast": 1, "Reshape": 1, "Tile": 1}
# Ops passing shape values through unchanged, and which inputs carry them (none listed: all of them).
_SHAPE_CARRIERS: dict[str, tuple[int, ...]] = {"Concat": (), "Convert": (0,), "Unsqueeze": (0,), "Squeeze": (0,)}
_MAX_DIM = 1 << 40


def _tensor_name(layer: Layer, port_index: int = 0) -> str:
    """What OpenVINO's ``get_any_name()`` returns: the smallest tensor name, else the layer name."""
    names = layer.outputs[port_index].names if layer.outputs else ()
    return min(names) if names else layer.name


def _add_inputs(graph: Graph, b: GraphBuilder, values: dict[tuple[int, int], str]) -> None:
    for layer in graph.parameters:
        name = _tensor_name(layer)
        if b.names.taken(name):
            raise ConversionError(f"{graph.source}: {layer.describe()}: input name '{name}' is used twice")
        b.names.reserve(name)
        etype = layer.outputs[0].element_type
        shape = parse_partial_shape(layer.attrs.get("shape", "..."))
        dims = (
            None if shape.dims is None else [d.lo if d.is_static else f"{name}_d{i}" for i, d in enumerate(shape.dims)]
        )
        b.add_input(name, onnx_type(etype, f"{graph.source}: {layer.describe()}"), dims)
        values[(layer.id, layer.outputs[0].id)] = name


def _output_name(graph: Graph, layer: Layer) -> str:
    """A Result's name as OpenVINO gives it: the smallest name of the tensor it takes, else its own."""
    _, port = graph.producer(layer, 0)
    return min(port.names) if port.names else layer.name


def _reserve_outputs(graph: Graph, b: GraphBuilder) -> None:
    for layer in graph.results:
        try:
            b.names.reserve(_output_name(graph, layer))
        except (IndexError, KeyError):  # a Result without input: _add_outputs reports it
            continue


def _add_outputs(graph: Graph, b: GraphBuilder, value_of) -> None:  # noqa: ANN001
    """Name outputs as OpenVINO does, renaming the producing value where we can, else via Identity.

    Every output's name was reserved before translation (:func:`_reserve_outputs`), so no value
    made since has it; an input of that name, or an earlier output, makes it take a suffix.
    """
    produced = {out for node in b.nodes for out in node.output}
    inputs = {i.name for i in b.inputs}
    renames: dict[str, str] = {}
    outputs: set[str] = set()
    for layer in graph.results:
        value = value_of(layer, 0)
        name = _output_name(graph, layer)
        if value == name and name not in outputs:
            pass
        elif value in produced and value not in renames and name not in outputs and name not in inputs:
            renames[value] = name
        else:
            if name in outputs or name in inputs:
                name = b.names.fresh(name)
            b.op("Identity", [value], names=[name])
        outputs.add(name)
        etype = _output_type(graph, layer)
        # onnx.checker wants a shape on graph outputs; IR ports give the rank, -1 where dynamic.
        dims = [d.lo if d.is_static else f"{name}_d{i}" for i, d in enumerate(layer.inputs[0].shape.dims or ())]
        b.add_output(name, etype, dims)
    b.rename_all(renames)


def _output_type(graph: Graph, layer: Layer) -> int:
    _, port = graph.producer(layer, 0)
    etype = port.element_type or layer.inputs[0].element_type
    return onnx_type(etype, f"{graph.source}: {layer.describe()}")

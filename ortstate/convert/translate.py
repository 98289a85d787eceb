"""The layer walk: translating one IR layer, and a loop body, into ONNX nodes.

The driver walks the main graph (where variables are read and written through the state writer)
and the loop translators walk their bodies (where variables are loop-carried values), both
through this module; it imports neither of them.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import TensorProto

from ..errors import ConversionError, OrtStateError
from ..ir import Graph, Layer
from ..ir.walk import upstream
from ..meta import name_prefix
from .builder import GraphBuilder
from .compressed import CompressedInput, FloatWeight, float_weight, plan_weights, record_expanded
from .context import Context, ConvertOptions
from .dtypes import numpy_type, onnx_type
from .folding import constant_value, feeds_only_folds
from .loop_state import BodyScope
from .registry import translator_for

__all__ = ["Values", "input_value", "tag", "translate_body", "translate_layer"]

# (layer id, output port id) -> the ONNX value carrying it
Values = dict[tuple[int, int], str]
ValueOf = Callable[[Layer, int], str]
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


def translate_body(
    body: Graph,
    builder: GraphBuilder,
    params: dict[int, str],
    scope: BodyScope | None = None,
    options: ConvertOptions | None = None,
) -> dict[int, str]:
    """Translate a TensorIterator/Loop body into ``builder``.

    Args:
        params: ONNX value name for each body Parameter (by layer id).
        scope: the body's variables (a :class:`~.loop_state.BodyScope`), if it has any.

    Returns:
        The ONNX value feeding each body Result (by layer id).
    """
    values: Values = {}
    ctx = Context(body, builder, scope, options)

    def value_of(layer: Layer, index: int) -> str:
        return input_value(body, values, layer, index)

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
            translate_layer(layer, ctx, values, value_of)
    return {layer.id: value_of(layer, 0) for layer in body.results}


def translate_layer(layer: Layer, ctx: Context, values: Values, value_of: ValueOf) -> None:
    """Translate ``layer`` into ``ctx.b``, recording its outputs' values (or fold it away)."""
    plan = plan_weights(ctx.graph)
    if layer.id in plan.skipped:
        if layer.id in plan.weights:  # read compressed by every consumer: no value of its own
            values[(layer.id, layer.outputs[0].id)] = CompressedInput(layer)
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
        record_expanded(ctx, layer, folded.size, name)
        return
    fn = translator_for(layer.type, layer.op_version)
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
    tag(ctx.b.nodes[first:], layer)


def tag(nodes: list[onnx.NodeProto], layer: Layer) -> None:
    """Record the IR layer behind each node, so the runtime can name it when onnxruntime refuses one."""
    described = layer.describe()
    for node in nodes:
        node.doc_string = node.doc_string or described


def input_value(graph: Graph, values: Values, layer: Layer, index: int) -> str:
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

    def carried(src: Layer) -> tuple[int, ...] | range:
        """The inputs of ``src`` carrying shape values unchanged (none: the walk stops there)."""
        if src.type not in _SHAPE_CARRIERS:
            return ()
        return _SHAPE_CARRIERS[src.type] or range(len(src.inputs))

    for src in upstream(graph, [graph.producer(layer, index)[0]], carried):
        if src.type == "Const":
            value = graph.constant(src)
            if value.dtype.kind in "iu" and value.size and int(value.max()) > _MAX_DIM:
                raise ConversionError(
                    f"{graph.source}: {layer.describe()}: input {index} takes dim {int(value.max())} from "
                    f"layer '{name_prefix(src.name)}' (id {src.id}); no tensor can have a dim above {_MAX_DIM}"
                )


_SHAPE_INPUTS = {"Broadcast": 1, "Reshape": 1, "Tile": 1}
# Ops passing shape values through unchanged, and which inputs carry them (none listed: all of them).
_SHAPE_CARRIERS: dict[str, tuple[int, ...]] = {"Concat": (), "Convert": (0,), "Unsqueeze": (0,), "Squeeze": (0,)}
_MAX_DIM = 1 << 40

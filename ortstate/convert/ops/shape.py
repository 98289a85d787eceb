"""Shape and rank: ShapeOf, Reshape, Squeeze, Unsqueeze."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..context import Context, Node
from ..dtypes import onnx_type
from ..int64 import int64_vector
from ..registry import translator


@translator("ShapeOf", 1)
def shape_of_v1(node: Node, ctx: Context) -> list[str]:
    """ShapeOf-1 always yields i64."""
    return [ctx.b.op("Shape", [node.inputs[0]])]


@translator("ShapeOf", 3)
def shape_of_v3(node: Node, ctx: Context) -> list[str]:
    """ShapeOf-3: ``output_type`` i64 or i32."""
    out_type = (
        onnx_type(node.attr_type("output_type"), node.where) if "output_type" in node.layer.attrs else TensorProto.INT64
    )
    shape = ctx.b.op("Shape", [node.inputs[0]])
    return [shape if out_type == TensorProto.INT64 else ctx.b.op("Cast", [shape], {"to": out_type})]


@translator("Reshape", 1)
def reshape_v1(node: Node, ctx: Context) -> list[str]:
    """Reshape-1 -> Reshape. In the target shape -1 infers a dim in both; a 0 copies the input dim when
    ``special_zero`` is true (ONNX ``allowzero=0``) and is a zero-sized dim when false (``allowzero=1``)."""
    special_zero = node.attr_bool("special_zero")
    shape = int64_vector(node, ctx, 1)
    known = node.const(1)
    copies_nothing = known is not None and 0 not in np.asarray(known).reshape(-1)
    attrs = {} if special_zero or copies_nothing else {"allowzero": 1}
    return [ctx.b.op("Reshape", [node.inputs[0], shape], attrs)]


@translator("Unsqueeze", 1)
def unsqueeze_v1(node: Node, ctx: Context) -> list[str]:
    """Unsqueeze-1 -> Unsqueeze. OpenVINO allows scalar axes; both count negative axes from the output rank."""
    return [ctx.b.op("Unsqueeze", [node.inputs[0], int64_vector(node, ctx, 1)])]


def _squeeze(node: Node, ctx: Context, skip_dynamic: bool) -> list[str]:
    """OpenVINO squeezes the listed axes whose dim is 1 and leaves the others as they are (since 2024.3);
    ONNX Squeeze fails on a dim that is not 1. Axes known not to be 1 in the IR are dropped here; a dynamic
    dim is squeezed as ONNX does unless ``skip_dynamic``, which decides at run time (see :func:`_squeeze_ones`)."""
    b = ctx.b
    if len(node.inputs) < 2:
        return [b.op("Squeeze", [node.inputs[0]])]
    axes_value = node.const(1)
    if axes_value is None:
        return [_squeeze_ones(node, ctx, int64_vector(node, ctx, 1))]
    axes = [int(a) for a in np.asarray(axes_value).reshape(-1)]
    if not axes:
        return [b.op("Squeeze", [node.inputs[0]])]
    rank = node.input_rank(0)
    kept: list[int] = []
    for axis in sorted({a + rank if a < 0 else a for a in axes}):
        dim = node.static_dim(0, axis)
        if dim is None and skip_dynamic:
            return [_squeeze_ones(node, ctx, b.const(np.array(axes, np.int64)))]
        if dim is None or dim == 1:
            kept.append(axis)
    if not kept:
        return [b.op("Identity", [node.inputs[0]])]
    return [b.op("Squeeze", [node.inputs[0], b.const(np.array(kept, np.int64))])]


def _squeeze_ones(node: Node, ctx: Context, axes: str) -> str:
    """Squeeze the dims listed in ``axes`` that are 1 at run time (all 1-dims when ``axes`` is empty)."""
    b = ctx.b
    shape = b.op("Shape", [node.inputs[0]])
    # Not Size(shape): onnxruntime 1.31's shape inference takes Size(Shape(x)) for the element count of x.
    rank = b.op("Squeeze", [b.op("Shape", [shape])])
    positions = b.op("Range", [b.const(np.array(0, np.int64)), rank, b.const(np.array(1, np.int64))])
    axes = b.op("Where", [b.op("Less", [axes, b.const(np.array(0, np.int64))]), b.op("Add", [axes, rank]), axes])
    # listed[j]: dim j is among the axes, counted as a [rank, n_axes] equality table summed over the axes.
    table = b.op("Equal", [b.op("Unsqueeze", [positions, b.const(np.array([1], np.int64))]), axes])
    hits = b.op(
        "ReduceSum",
        [b.op("Cast", [table], {"to": TensorProto.INT64}), b.const(np.array([1], np.int64))],
        {"keepdims": 0},
    )
    listed = b.op("Greater", [hits, b.const(np.array(0, np.int64))])
    no_axes = b.op("Equal", [b.op("Size", [axes]), b.const(np.array(0, np.int64))])
    drop = b.op("And", [b.op("Or", [listed, no_axes]), b.op("Equal", [shape, b.const(np.array(1, np.int64))])])
    new_shape = b.op("Compress", [shape, b.op("Not", [drop])], {"axis": 0})
    return b.op("Reshape", [node.inputs[0], new_shape], {"allowzero": 1})


@translator("Squeeze", 1)
def squeeze_v1(node: Node, ctx: Context) -> list[str]:
    """Squeeze-1: optional ``axes`` input (scalar or 1-D); no axes (or empty) squeezes every 1-dim."""
    return _squeeze(node, ctx, skip_dynamic=False)


@translator("Squeeze", 15)
def squeeze_v15(node: Node, ctx: Context) -> list[str]:
    """Squeeze-15: as Squeeze-1; with ``allow_axis_skip`` a listed dynamic dim is kept if it is not 1 at run time."""
    return _squeeze(node, ctx, skip_dynamic=node.attr_bool("allow_axis_skip", False))

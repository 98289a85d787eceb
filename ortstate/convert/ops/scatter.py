"""Scatters: ScatterUpdate, ScatterNDUpdate, ScatterElementsUpdate."""

from __future__ import annotations

import numpy as np

from ..context import Context, Node
from ..dtypes import numpy_type
from ..int64 import i64, int64_input, scalar_const
from ..registry import translator

# OpenVINO reduction -> ONNX ScatterND/ScatterElements reduction ("sub" adds negated updates, "mean" is built).
_REDUCTIONS = {"none": "none", "sum": "add", "sub": "add", "prod": "mul", "min": "min", "max": "max"}


def _filled(node: Node, ctx: Context, like: str, value: float) -> str:
    """A tensor shaped like ``like`` holding ``value`` in the data's (input 0) element type."""
    dtype = numpy_type(node.onnx_input_type(0))
    return ctx.b.op("Expand", [ctx.b.const(np.array(value).astype(dtype)), ctx.b.op("Shape", [like])])


def _inverse(perm: list[int]) -> list[int]:
    return [perm.index(i) for i in range(len(perm))]


@translator("ScatterUpdate", 3)
def scatter_update_v3(node: Node, ctx: Context) -> list[str]:
    """ScatterUpdate-3 (data, indices, updates, axis): data[..., indices[j...], ...] = updates[..., j..., ...]
    along a constant ``axis``, with updates shaped ``data[:axis] + indices.shape + data[axis + 1:]``.

    ONNX has no such op: ``axis`` is moved to the front of data and the indices' dims to the front of updates,
    ScatterND writes whole slices, and data is moved back.
    """
    b = ctx.b
    rank, q = node.input_rank(0), node.input_rank(1)
    axis = scalar_const(node, 3, "axis")
    axis += rank if axis < 0 else 0
    points = b.op("Unsqueeze", [int64_input(node, ctx, 1), i64(ctx, [-1])])
    if axis == 0:
        return [b.op("ScatterND", [node.inputs[0], points, node.inputs[2]])]
    to_front = [axis] + [d for d in range(rank) if d != axis]
    data = b.op("Transpose", [node.inputs[0]], {"perm": to_front})
    update_order = list(range(axis, axis + q)) + list(range(axis)) + list(range(axis + q, rank - 1 + q))
    updates = b.op("Transpose", [node.inputs[2]], {"perm": update_order})
    out = b.op("ScatterND", [data, points, updates])
    return [b.op("Transpose", [out], {"perm": _inverse(to_front)})]


def _scatter_nd(node: Node, ctx: Context, reduction: str) -> list[str]:
    b = ctx.b
    updates = b.op("Neg", [node.inputs[2]]) if reduction == "sub" else node.inputs[2]
    attrs = {"reduction": _REDUCTIONS[reduction]} if reduction != "none" else {}
    return [b.op("ScatterND", [node.inputs[0], int64_input(node, ctx, 1), updates], attrs)]


@translator("ScatterNDUpdate", 3)
def scatter_nd_update_v3(node: Node, ctx: Context) -> list[str]:
    """ScatterNDUpdate-3 -> ScatterND (indices [..., k] address the leading k dims of data)."""
    return _scatter_nd(node, ctx, "none")


@translator("ScatterNDUpdate", 15)
def scatter_nd_update_v15(node: Node, ctx: Context) -> list[str]:
    """ScatterNDUpdate-15: ``reduction`` none/sum/sub/prod/min/max -> ScatterND none/add/add(-u)/mul/min/max."""
    return _scatter_nd(node, ctx, node.attr_choice("reduction", tuple(_REDUCTIONS), "none"))


@translator("ScatterElementsUpdate", 3)
def scatter_elements_update_v3(node: Node, ctx: Context) -> list[str]:
    """ScatterElementsUpdate-3 (data, indices, updates, axis) -> ScatterElements with a constant ``axis``."""
    axis = scalar_const(node, 3, "axis")
    return [ctx.b.op("ScatterElements", node.inputs[:3], {"axis": axis})]


@translator("ScatterElementsUpdate", 12)
def scatter_elements_update_v12(node: Node, ctx: Context) -> list[str]:
    """ScatterElementsUpdate-12: ``reduction`` none/sum/prod/min/max/mean and ``use_init_val``.

    ONNX ScatterElements reduces into the data values; without ``use_init_val`` the addressed elements are
    first overwritten by the reduction's identity (0, 1, +max, -max). ONNX has no mean: it is the sum divided
    by how many values each element got (rounded down for integers, as OpenVINO does).
    """
    b = ctx.b
    axis = scalar_const(node, 3, "axis")
    reduction = node.attr_choice("reduction", ("none", "sum", "prod", "min", "max", "mean"), "none")
    use_init = node.attr_bool("use_init_val", True)
    data, indices, updates = node.inputs[:3]
    if reduction == "none":
        return [b.op("ScatterElements", [data, indices, updates], {"axis": axis})]
    dtype = numpy_type(node.onnx_input_type(0))
    if not use_init:
        limits = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
        identity = {"sum": 0, "mean": 0, "prod": 1, "min": limits.max, "max": limits.min}[reduction]
        data = b.op("ScatterElements", [data, indices, _filled(node, ctx, updates, identity)], {"axis": axis})
    onnx_reduction = "add" if reduction == "mean" else _REDUCTIONS[reduction]
    out = b.op("ScatterElements", [data, indices, updates], {"axis": axis, "reduction": onnx_reduction})
    if reduction != "mean":
        return [out]
    counts = b.op(
        "ScatterElements",
        [_filled(node, ctx, node.inputs[0], int(use_init)), indices, _filled(node, ctx, updates, 1)],
        {"axis": axis, "reduction": "add"},
    )
    if not use_init:  # elements no update reached keep their value: divide by 1
        counts = b.op("Max", [counts, _filled(node, ctx, counts, 1)])
    if dtype.kind == "f":
        return [b.op("Div", [out, counts])]
    # Div truncates integers toward zero; subtracting the (non-negative) remainder first makes it floor.
    return [b.op("Div", [b.op("Sub", [out, b.op("Mod", [out, counts])]), counts])]

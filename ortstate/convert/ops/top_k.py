"""TopK."""

from __future__ import annotations

from onnx import TensorProto

from ..context import Context, Node
from ..int64 import i64, int64_input
from ..registry import translator


def _top_k(node: Node, ctx: Context) -> list[str]:
    """TopK (data, k; ``axis``, ``mode``, ``sort``) -> TopK (``largest``, ``sorted=1``); equal values come out
    lowest index first, which is what OpenVINO's ``stable`` asks for. ``sort=index`` re-sorts the k results
    by index with a second TopK over the indices; ``sort=none`` (any order) is given in value order."""
    b = ctx.b
    axis = node.attr_int("axis")
    largest = node.attr_choice("mode", ("max", "min")) == "max"
    sort = node.attr_choice("sort", ("value", "index", "none"))
    k = b.op("Reshape", [int64_input(node, ctx, 1), i64(ctx, [1])])
    values, indices = b.op("TopK", [node.inputs[0], k], {"axis": axis, "largest": int(largest)}, outputs=2)
    if sort == "index":
        indices, order = b.op("TopK", [indices, k], {"axis": axis, "largest": 0}, outputs=2)
        values = b.op("GatherElements", [values, order], {"axis": axis})
    index_type = node.onnx_output_type(1)
    if index_type != TensorProto.INT64:
        indices = b.op("Cast", [indices], {"to": index_type})
    return [values, indices]


@translator("TopK", 1)
def top_k_v1(node: Node, ctx: Context) -> list[str]:
    """TopK-1: the index output type is the output port's (i32 unless ``index_element_type`` says)."""
    return _top_k(node, ctx)


@translator("TopK", 3)
def top_k_v3(node: Node, ctx: Context) -> list[str]:
    """TopK-3: as TopK-1; ``index_element_type`` i32/i64 decides the index output type."""
    return _top_k(node, ctx)


@translator("TopK", 11)
def top_k_v11(node: Node, ctx: Context) -> list[str]:
    """TopK-11: adds ``stable``, which the ONNX mapping always satisfies."""
    node.attr_bool("stable", False)
    return _top_k(node, ctx)

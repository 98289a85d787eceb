"""Split, VariadicSplit."""

from __future__ import annotations

import numpy as np

from ..context import Context, Node
from ..int64 import int64_vector, scalar_const
from ..registry import translator


def _as_list(outs: str | list[str]) -> list[str]:
    return outs if isinstance(outs, list) else [outs]


@translator("Split", 1)
def split_v1(node: Node, ctx: Context) -> list[str]:
    """Split-1 -> Split into ``num_splits`` equal parts along a constant ``axis`` input."""
    axis = scalar_const(node, 1, "axis")
    count = node.attr_int("num_splits")
    if count != len(node.layer.outputs):
        raise node.error(f"num_splits={count} but the layer has {len(node.layer.outputs)} outputs")
    return _as_list(ctx.b.op("Split", [node.inputs[0]], {"axis": axis, "num_outputs": count}, outputs=count))


@translator("VariadicSplit", 1)
def variadic_split_v1(node: Node, ctx: Context) -> list[str]:
    """VariadicSplit-1 -> Split with a ``split`` input. One length may be -1 (the rest of the axis), which
    ONNX does not allow: it becomes ``dim - sum(other lengths)``, at run time when the dim is dynamic."""
    b = ctx.b
    axis = scalar_const(node, 1, "axis")
    count = len(node.layer.outputs)
    lengths = node.const(2)
    if lengths is not None:
        sizes = [int(v) for v in np.asarray(lengths).reshape(-1)]
        if len(sizes) != count:
            raise node.error(f"split_lengths has {len(sizes)} values but the layer has {count} outputs")
        rank = node.input_rank(0)
        dim = node.static_dim(0, axis + rank if axis < 0 else axis)
        if -1 in sizes and dim is not None:
            sizes[sizes.index(-1)] = dim - (sum(sizes) + 1)
        if -1 not in sizes:
            split = b.const(np.array(sizes, np.int64))
            return _as_list(b.op("Split", [node.inputs[0], split], {"axis": axis}, outputs=count))
    # sum(lengths) + 1 is the sum of the others where one length is -1.
    given = int64_vector(node, ctx, 2)
    dim = b.op("Gather", [b.op("Shape", [node.inputs[0]]), b.const(np.array(axis, np.int64))])
    rest = b.op("Sub", [dim, b.op("Add", [b.op("ReduceSum", [given]), b.const(np.array(1, np.int64))])])
    split = b.op("Where", [b.op("Equal", [given, b.const(np.array(-1, np.int64))]), rest, given])
    return _as_list(b.op("Split", [node.inputs[0], split], {"axis": axis}, outputs=count))

"""OneHot."""

from __future__ import annotations

import numpy as np

from ..context import Context, Node
from ..int64 import i64, int64_input
from ..registry import translator


@translator("OneHot", 1)
def one_hot_v1(node: Node, ctx: Context) -> list[str]:
    """OneHot-1 (indices, depth, on, off; ``axis``) as Where(indices == range(depth), on, off).

    Not ONNX OneHot: it counts negative indices from the end where OpenVINO gives an all-``off`` row for any
    index outside [0, depth), and onnxruntime implements it for few type combinations.
    """
    b = ctx.b
    rank = node.input_rank(0)
    axis = node.attr_int("axis")
    axis += rank + 1 if axis < 0 else 0
    indices = b.op("Unsqueeze", [int64_input(node, ctx, 0), i64(ctx, [axis])])
    depth = b.op("Reshape", [int64_input(node, ctx, 1), b.const(np.zeros(0, np.int64))])
    classes = b.op("Range", [i64(ctx, 0), depth, i64(ctx, 1)])
    classes = b.op("Reshape", [classes, i64(ctx, [-1] + [1] * (rank - axis))])
    hot = b.op("Equal", [indices, classes])
    return [b.where(hot, node.inputs[2], node.inputs[3], node.onnx_output_type())]

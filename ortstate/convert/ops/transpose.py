"""Transpose."""

from __future__ import annotations

import numpy as np

from ..context import Context, Node
from ..int64 import int64_input
from ..registry import translator


@translator("Transpose", 1)
def transpose_v1(node: Node, ctx: Context) -> list[str]:
    """Transpose-1 -> Transpose with ``perm`` = ``input_order`` (output dim k is input dim order[k]);
    an empty order reverses the dims, as ONNX does without ``perm``. A run-time order, which ONNX cannot
    take as an attribute, is applied by gathering through index grids (:func:`_transpose_runtime`)."""
    b = ctx.b
    order = node.const(1)
    if order is None:
        length = node.input_shape(1).to_list()
        if not length or length[0] < 0:
            raise node.error("a run-time input_order needs a static length")
        if length[0] == 0:
            return [b.op("Transpose", [node.inputs[0]])]
        return [_transpose_runtime(node, ctx, length[0])]
    perm = [int(v) for v in np.asarray(order).reshape(-1)]
    if not perm:
        return [b.op("Transpose", [node.inputs[0]])]
    rank = len(perm)
    perm = [p + rank if p < 0 else p for p in perm]
    if sorted(perm) != list(range(rank)):
        # onnxruntime aborts kernel creation on such a perm without naming the node.
        raise node.error(f"input_order {[int(v) for v in np.asarray(order).reshape(-1)]} is not a permutation")
    return [b.op("Transpose", [node.inputs[0]], {"perm": perm})]


def _transpose_runtime(node: Node, ctx: Context, rank: int) -> str:
    """out[i_0..i_{r-1}] = x[j] with j[order[k]] = i_k: build the output's coordinate grid, permute its last
    axis by the inverse order and GatherND."""
    b = ctx.b
    order = int64_input(node, ctx, 1)
    out_shape = b.op("Gather", [b.op("Shape", [node.inputs[0]]), order])
    coords = []
    for k in range(rank):
        size = b.op("Gather", [out_shape, b.const(np.array(k, np.int64))])
        steps = b.op("Range", [b.const(np.array(0, np.int64)), size, b.const(np.array(1, np.int64))])
        along_k = b.op("Reshape", [steps, b.const(np.array([-1 if a == k else 1 for a in range(rank)], np.int64))])
        grid = b.op("Expand", [along_k, out_shape])
        coords.append(b.op("Unsqueeze", [grid, b.const(np.array([-1], np.int64))]))
    out_coords = b.op("Concat", coords, {"axis": -1})
    identity = b.const(np.arange(rank, dtype=np.int64))
    inverse = b.op("ScatterElements", [identity, order, identity])
    in_coords = b.op("Gather", [out_coords, inverse], {"axis": -1})
    return b.op("GatherND", [node.inputs[0], in_coords])

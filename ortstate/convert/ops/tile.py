"""Tile."""

from __future__ import annotations

import numpy as np

from ..context import Context, Node
from ..int64 import int64_vector
from ..registry import translator


@translator("Tile", 1)
def tile_v1(node: Node, ctx: Context) -> list[str]:
    """Tile-1 -> Tile. OpenVINO aligns ``repeats`` and the data rank by prepending 1s to the shorter (a
    longer ``repeats`` adds leading dims); ONNX needs len(repeats) == rank, so the shorter side is padded."""
    b = ctx.b
    rank = node.input_rank(0)
    repeats = int64_vector(node, ctx, 1)
    known = node.const(1)
    count = int(np.asarray(known).size) if known is not None else (node.input_shape(1).to_list() or [-1])[0]
    if count < 0:
        raise node.error("repeats needs a static length")
    data = node.inputs[0]
    if count > rank:
        data = b.op("Unsqueeze", [data, b.const(np.arange(count - rank, dtype=np.int64))])
    elif count < rank:
        repeats = b.op("Concat", [b.const(np.ones(rank - count, np.int64)), repeats], {"axis": 0})
    return [b.op("Tile", [data, repeats])]

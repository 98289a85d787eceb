"""Broadcast (numpy, bidirectional and explicit modes)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..context import Context, Node
from ..registry import translator


def _broadcast(node: Node, ctx: Context, bidirectional_ok: bool) -> list[str]:
    """OpenVINO ``numpy`` and ``bidirectional`` modes both equal ONNX Expand for valid inputs;
    ``explicit`` maps input dims onto ``axes_mapping`` (input 2) by reshaping first; Broadcast-1 writes it
    as ``none`` in the IR (the same enum value)."""
    mode = node.attr("mode", "numpy").lower()
    b = ctx.b
    target = b.op("Cast", [node.inputs[1]], {"to": TensorProto.INT64})
    if mode in ("numpy", "pdpd") or (bidirectional_ok and mode == "bidirectional"):
        if mode == "pdpd" and node.attr_int("axis", -1) != -1:
            raise node.error("pdpd broadcast with an axis is not supported")
        return [b.op("Expand", [node.inputs[0], target])]
    if mode in ("explicit", "none"):
        axes = node.const_ints(2, "axes_mapping")
        dims = node.input_shape(1).dims
        out_rank = dims[0].lo if dims and dims[0].is_static else None
        if out_rank is None:
            value = node.const(1)
            if value is None:
                raise node.error("explicit broadcast needs a target shape of known length")
            out_rank = int(np.asarray(value).size)
        # Reshape the input to rank out_rank with 1s everywhere but the mapped axes.
        in_shape = b.op("Shape", [node.inputs[0]])
        pieces = []
        mapped = {a: i for i, a in enumerate(axes)}
        for axis in range(out_rank):
            if axis in mapped:
                pieces.append(
                    b.op("Slice", [in_shape, b.const([mapped[axis]], np.int64), b.const([mapped[axis] + 1], np.int64)])
                )
            else:
                pieces.append(b.const([1], np.int64))
        shape = (
            b.op("Concat", pieces, {"axis": 0})
            if len(pieces) > 1
            else pieces[0]
            if pieces
            else b.const(np.zeros(0, np.int64))
        )
        reshaped = b.op("Reshape", [node.inputs[0], shape])
        return [b.op("Expand", [reshaped, target])]
    raise node.error(f"unsupported broadcast mode {mode!r}")


@translator("Broadcast", 1)
def broadcast_v1(node: Node, ctx: Context) -> list[str]:
    return _broadcast(node, ctx, bidirectional_ok=False)


@translator("Broadcast", 3)
def broadcast_v3(node: Node, ctx: Context) -> list[str]:
    return _broadcast(node, ctx, bidirectional_ok=True)

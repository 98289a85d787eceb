"""Range-1 and Range-4: arithmetic sequences [start, stop) with a step, scalars possibly computed at run time."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..context import Context, Node
from ..registry import translator

# onnxruntime implements Range for these types only; others compute in a wider one and cast.
_RANGE_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64}
_FLOATS = {TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE}


def _range(node: Node, ctx: Context, out_type: int) -> list[str]:
    """Cast start/stop/step to the output type (float -> integer truncates toward zero, as OpenVINO does before
    counting ``max(ceil((stop - start) / step), 0)`` elements), run ONNX Range, cast the result if needed."""
    b = ctx.b
    compute = out_type if out_type in _RANGE_TYPES else TensorProto.FLOAT if out_type in _FLOATS else TensorProto.INT64
    scalars = []
    for i in range(3):
        value, value_type = node.inputs[i], node.onnx_input_type(i)
        if node.input_shape(i).rank:  # a [1] tensor where ONNX wants a scalar
            value = b.op("Reshape", [value, b.const(np.zeros(0, np.int64))])
        if out_type not in _FLOATS and value_type != out_type:  # integers: truncate to the output type first
            value, value_type = b.op("Cast", [value], {"to": out_type}), out_type
        if value_type != compute:
            value = b.op("Cast", [value], {"to": compute})
        scalars.append(value)
    out = b.op("Range", scalars)
    return [out if compute == out_type else b.op("Cast", [out], {"to": out_type})]


@translator("Range", 1)
def range_v1(node: Node, ctx: Context) -> list[str]:
    """Range-1: start, stop and step share one type, which is the output type."""
    return _range(node, ctx, node.onnx_output_type())


@translator("Range", 4)
def range_v4(node: Node, ctx: Context) -> list[str]:
    """Range-4: inputs of any numeric types; ``output_type`` decides the arithmetic (see :func:`_range`)."""
    return _range(node, ctx, node.onnx_output_type())

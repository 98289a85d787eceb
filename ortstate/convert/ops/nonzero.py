"""NonZero: the indices of a tensor's non-zero elements (MoE routing: ``torch.where(mask)``)."""

from __future__ import annotations

from onnx import TensorProto

from ..context import Context, Node
from ..registry import translator

# Element types onnxruntime 1.31's NonZero kernel takes; others are tested for non-zero as bool first.
_ORT_NONZERO = frozenset(
    {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.BOOL}
)


@translator("NonZero", 3)
def non_zero_v3(node: Node, ctx: Context) -> list[str]:
    """NonZero-3 -> NonZero: both give a ``[rank, count]`` tensor, column ``j`` the index of the
    ``j``-th non-zero element in row-major order (NaN and -0.0 count as non-zero and zero, in both;
    a scalar has rank 1 here: ``[1, 0 or 1]``). ``output_type`` i32 is a Cast of ONNX's int64."""
    output_type = node.attr_choice("output_type", ("i64", "i32"), "i64")
    b = ctx.b
    data = node.inputs[0]
    if node.onnx_input_type(0) not in _ORT_NONZERO:
        data = b.op("Cast", [data], {"to": TensorProto.BOOL})  # exact: x != 0, NaN included
    out = b.op("NonZero", [data])
    return [b.op("Cast", [out], {"to": TensorProto.INT32})] if output_type == "i32" else [out]

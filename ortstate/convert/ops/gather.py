"""Gathers: Gather, GatherND, GatherElements (an embedding table kept compressed is read compressed)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..compressed import FloatWeight, QuantizedWeight, float_weight, gather_quantized
from ..context import Context, Node
from ..dtypes import numpy_type
from ..int64 import i64, int64_input, scalar_const
from ..registry import translator

_MAX = np.iinfo(np.int64).max  # "to the end" in a Slice


# -- Gather ------------------------------------------------------------------------------------
def _gather_any(node: Node, ctx: Context, batch_dims: int, zero_out_of_range: bool) -> list[str]:
    """Gather, with a compressed table (see ``compressed``) read compressed."""
    weight = node.weight(0)
    if isinstance(weight, QuantizedWeight):  # an embedding table kept compressed (axis 0, no batch)
        indices = node.inputs[1] if node.input_type(1).name in ("i32", "i64") else int64_input(node, ctx, 1)
        return [gather_quantized(node, ctx, weight, indices)]
    if isinstance(weight, FloatWeight):  # gather f16 rows, then widen them: the table stays f16
        stored, _ = float_weight(ctx, weight)
        stored_type = TensorProto.BFLOAT16 if weight.value.dtype.name == "bfloat16" else TensorProto.FLOAT16
        out = _gather(node, ctx, batch_dims, zero_out_of_range, (stored, stored_type))
        return [ctx.b.op("Cast", [out[0]], {"to": node.onnx_output_type(0)})]
    return _gather(node, ctx, batch_dims, zero_out_of_range)


def _gather(
    node: Node, ctx: Context, batch_dims: int, zero_out_of_range: bool, data: tuple[str, int] | None = None
) -> list[str]:
    """Output ``data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1:]`` for ``data``
    (an ONNX value and its type; input 0 by default).

    batch_dims 0 is ONNX Gather. Otherwise the gathered axis is moved next to the batch dims, GatherND with
    ``batch_dims`` gathers one index per batch entry, and the dims between batch and axis are moved back.
    """
    data_name, data_type = data or (node.inputs[0], node.onnx_input_type(0))
    b = ctx.b
    rank = node.input_rank(0)
    axis = scalar_const(node, 2, "axis")
    axis += rank if axis < 0 else 0
    if batch_dims < 0:
        batch_dims += node.input_rank(1)
    if not 0 <= batch_dims <= axis < rank:
        raise node.error(f"expected 0 <= batch_dims <= axis < rank {rank}, got batch_dims={batch_dims}, axis={axis}")
    indices, valid = node.inputs[1], None
    if zero_out_of_range and not _known_in_range(node, axis):
        constant_data = data is None and batch_dims == 0
        if constant_data and (out := _gather_constant_guarded(node, ctx, axis)) is not None:
            return [out]
        indices = int64_input(node, ctx, 1)
        dim = b.op("Gather", [b.op("Shape", [data_name]), i64(ctx, axis)])
        valid = b.op("And", [b.op("GreaterOrEqual", [indices, b.op("Neg", [dim])]), b.op("Less", [indices, dim])])
        indices = b.op("Where", [valid, indices, i64(ctx, 0)])
    if batch_dims == 0:
        out = b.op("Gather", [data_name, indices], {"axis": axis})
    else:
        out = _batched_gather(node, ctx, data_name, indices, batch_dims, axis, rank)
    if valid is not None:
        # valid has the indices' shape [B..., I...]; align it with the output [B..., P..., I..., S...].
        between = list(range(batch_dims, axis)) + list(range(-1, axis - rank, -1))
        mask = b.op("Unsqueeze", [valid, b.const(np.array(between, np.int64))]) if between else valid
        zero = b.const(np.zeros((), numpy_type(data_type)))
        out = b.where(mask, out, zero, data_type)
    return [out]


# Constant data up to this size (stored twice) gets the cheap range guard below.
DOUBLED_LIMIT = 16 << 20


def _gather_constant_guarded(node: Node, ctx: Context, axis: int) -> str | None:
    """Gather-8 on constant data (an embedding table): ``Gather(concat(data, data, zeros),
    Clip(indices + N, -1, 2N))``, three nodes where the general guard takes eight. An index ``i``
    in [-N, N) lands on ``i + N``: the first copy serves the negative ones, the second the others;
    any other index is clipped to 2N or -1, both the zero slice at the end. None when the data is
    not constant or too large to store twice."""
    data = node.const(0)
    if data is None or data.ndim == 0 or 2 * data.nbytes > DOUBLED_LIMIT:
        return None
    b = ctx.b
    dtype = numpy_type(node.onnx_input_type(0))
    n = data.shape[axis]
    data = data.astype(dtype, copy=False)
    zeros = np.zeros([1 if i == axis else d for i, d in enumerate(data.shape)], dtype)
    doubled = np.concatenate([data, data, zeros], axis=axis)
    shifted = b.op("Add", [int64_input(node, ctx, 1), i64(ctx, n)])
    clipped = b.op("Clip", [shifted, i64(ctx, -1), i64(ctx, 2 * n)])
    return b.op("Gather", [b.const(doubled, hint="gather_data_doubled"), clipped], {"axis": axis})


def _known_in_range(node: Node, axis: int) -> bool:
    """True when constant indices lie within a static dim, so no run-time range check is needed."""
    indices = node.const(1)
    dims = node.input_shape(0).to_list()
    if indices is None or not dims or axis >= len(dims) or dims[axis] < 0:
        return False
    return bool(np.all((indices >= -dims[axis]) & (indices < dims[axis])))


def _batched_gather(node: Node, ctx: Context, data: str, indices: str, batch_dims: int, axis: int, rank: int) -> str:
    b = ctx.b
    if axis > batch_dims:
        data = b.op("Transpose", [data], {"perm": _move(list(range(rank)), axis, batch_dims)})
    if indices == node.inputs[1]:
        indices = int64_input(node, ctx, 1)
    points = b.op("Unsqueeze", [indices, i64(ctx, [-1])])
    out = b.op("GatherND", [data, points], {"batch_dims": batch_dims})
    if axis == batch_dims:
        return out
    # GatherND gave [B..., I..., P..., S...]; the P dims go back in front of I.
    q = node.input_rank(1)
    out_rank = rank - 1 + q - batch_dims
    order = list(range(batch_dims)) + list(range(q, q + axis - batch_dims)) + list(range(batch_dims, q))
    return b.op("Transpose", [out], {"perm": order + list(range(q + axis - batch_dims, out_rank))})


def _move(order: list[int], src: int, dst: int) -> list[int]:
    item = order.pop(src)
    order.insert(dst, item)
    return order


@translator("Gather", 1)
def gather_v1(node: Node, ctx: Context) -> list[str]:
    """Gather-1 -> Gather along a constant ``axis`` input. Indices must lie in [0, dim) (else undefined)."""
    return _gather_any(node, ctx, 0, zero_out_of_range=False)


@translator("Gather", 7)
def gather_v7(node: Node, ctx: Context) -> list[str]:
    """Gather-7: adds ``batch_dims`` (negative counts from the indices' rank)."""
    return _gather_any(node, ctx, node.attr_int("batch_dims", 0), zero_out_of_range=False)


@translator("Gather", 8)
def gather_v8(node: Node, ctx: Context) -> list[str]:
    """Gather-8: indices in [-dim, dim) (negative as in ONNX); others give zeros, where ONNX fails."""
    return _gather_any(node, ctx, node.attr_int("batch_dims", 0), zero_out_of_range=True)


@translator("GatherND", 5)
def gather_nd_v5(node: Node, ctx: Context) -> list[str]:
    """GatherND-5 -> GatherND, except that with ``batch_dims`` > 0 OpenVINO flattens the batch dims into one."""
    b = ctx.b
    batch_dims = node.attr_int("batch_dims", 0)
    out = b.op("GatherND", [node.inputs[0], int64_input(node, ctx, 1)], {"batch_dims": batch_dims})
    if batch_dims == 0:
        return [out]
    rest = b.op("Slice", [b.op("Shape", [out]), i64(ctx, [batch_dims]), i64(ctx, [_MAX])])
    return [b.op("Reshape", [out, b.op("Concat", [i64(ctx, [-1]), rest], {"axis": 0})])]


@translator("GatherND", 8)
def gather_nd_v8(node: Node, ctx: Context) -> list[str]:
    """GatherND-8 -> GatherND: batch dims are kept, as in ONNX."""
    batch_dims = node.attr_int("batch_dims", 0)
    return [ctx.b.op("GatherND", [node.inputs[0], int64_input(node, ctx, 1)], {"batch_dims": batch_dims})]


@translator("GatherElements", 6)
def gather_elements_v6(node: Node, ctx: Context) -> list[str]:
    """GatherElements-6 -> GatherElements (same ``axis`` attribute, negative indices allowed in both)."""
    return [ctx.b.op("GatherElements", node.inputs[:2], {"axis": node.attr_int("axis")})]

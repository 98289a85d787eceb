"""Reductions over the axes given as input 1: Sum, Mean, Max, Min, Prod, L1, L2, LogicalAnd, LogicalOr.

OpenVINO layout: ``Reduce*(data, axes)`` with ``keep_dims`` (default false); axes may be computed at
run time, may be negative, and an empty list reduces nothing. ONNX (opset 18+) also takes axes as an
input, but empty axes reduce everything unless ``noop_with_empty_axes=1``, which is always set here.
With no axes to reduce, both apply the element-wise part of L1/L2 (|x|).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ..context import Context, Node
from ..kernels import ORT_ARITHMETIC, ORT_FLOATS, computed_in
from ..registry import translator

# ReduceMax/Min also have 8-bit kernels; Sum/Mean/Prod/L1/L2 only int32, int64 and floats.
_ORDER_KERNELS = ORT_FLOATS | {T.INT8, T.UINT8, T.INT32, T.INT64}


def _axes(node: Node, ctx: Context) -> str:
    """Input 1 as the 1-D int64 tensor ONNX wants (OpenVINO also allows i32 and a scalar)."""
    value = node.const(1)
    if value is not None:
        axes = np.asarray(value)
        if axes.dtype == np.int64 and axes.ndim == 1:
            return node.inputs[1]
        return ctx.b.const(axes.astype(np.int64).reshape(-1))
    axes = node.inputs[1]
    if node.onnx_input_type(1) != T.INT64:
        axes = ctx.b.op("Cast", [axes], {"to": T.INT64})
    return ctx.b.op("Reshape", [axes, ctx.b.const(np.array([-1], np.int64))])


def _reduce(node: Node, ctx: Context, onnx_op: str, kernels: frozenset[int]) -> str:
    """``onnx_op`` over input 1's axes. Integers without an ORT kernel widen to int32/int64 (integer
    means and L2 norms truncate in both runtimes); overflow is not matched (OpenVINO's CPU plugin
    saturates 8-bit sums, a widened sum wraps when cast back)."""
    attrs = {"keepdims": int(node.attr_bool("keep_dims", False)), "noop_with_empty_axes": 1}
    axes = _axes(node, ctx)
    etype = node.onnx_input_type(0)
    return computed_in(ctx, [node.inputs[0]], etype, kernels, lambda v, _: ctx.b.op(onnx_op, [*v, axes], attrs))


@translator("ReduceSum", 1)
def reduce_sum_v1(node: Node, ctx: Context) -> list[str]:
    """ReduceSum-1 -> ReduceSum with ``noop_with_empty_axes=1`` (see :func:`_reduce`)."""
    return [_reduce(node, ctx, "ReduceSum", ORT_ARITHMETIC)]


@translator("ReduceMean", 1)
def reduce_mean_v1(node: Node, ctx: Context) -> list[str]:
    """ReduceMean-1 -> ReduceMean with ``noop_with_empty_axes=1`` (see :func:`_reduce`)."""
    return [_reduce(node, ctx, "ReduceMean", ORT_ARITHMETIC)]


@translator("ReduceProd", 1)
def reduce_prod_v1(node: Node, ctx: Context) -> list[str]:
    """ReduceProd-1 -> ReduceProd with ``noop_with_empty_axes=1`` (see :func:`_reduce`)."""
    return [_reduce(node, ctx, "ReduceProd", ORT_ARITHMETIC)]


@translator("ReduceMax", 1)
def reduce_max_v1(node: Node, ctx: Context) -> list[str]:
    """ReduceMax-1 -> ReduceMax with ``noop_with_empty_axes=1`` (see :func:`_reduce`)."""
    return [_reduce(node, ctx, "ReduceMax", _ORDER_KERNELS)]


@translator("ReduceMin", 1)
def reduce_min_v1(node: Node, ctx: Context) -> list[str]:
    """ReduceMin-1 -> ReduceMin with ``noop_with_empty_axes=1`` (see :func:`_reduce`)."""
    return [_reduce(node, ctx, "ReduceMin", _ORDER_KERNELS)]


@translator("ReduceL1", 4)
def reduce_l_1_v4(node: Node, ctx: Context) -> list[str]:
    """ReduceL1-4 -> ReduceL1 with ``noop_with_empty_axes=1`` (see :func:`_reduce`)."""
    return [_reduce(node, ctx, "ReduceL1", ORT_ARITHMETIC)]


@translator("ReduceL2", 4)
def reduce_l_2_v4(node: Node, ctx: Context) -> list[str]:
    """ReduceL2-4 -> ReduceL2 with ``noop_with_empty_axes=1`` (see :func:`_reduce`)."""
    return [_reduce(node, ctx, "ReduceL2", ORT_ARITHMETIC)]


def _logical(node: Node, ctx: Context, onnx_op: str) -> str:
    """ONNX has no boolean reductions: reduce the uint8 cast with Min (all) or Max (any), cast back."""
    if node.onnx_input_type(0) != T.BOOL:
        raise node.error(f"expected a boolean input, got ONNX type {node.onnx_input_type(0)}")
    attrs = {"keepdims": int(node.attr_bool("keep_dims", False)), "noop_with_empty_axes": 1}
    as_bytes = ctx.b.op("Cast", [node.inputs[0]], {"to": T.UINT8})
    reduced = ctx.b.op(onnx_op, [as_bytes, _axes(node, ctx)], attrs)
    return ctx.b.op("Cast", [reduced], {"to": T.BOOL})


@translator("ReduceLogicalAnd", 1)
def reduce_logical_and_v1(node: Node, ctx: Context) -> list[str]:
    """ReduceLogicalAnd-1 -> Cast(ReduceMin(Cast(x, uint8)), bool)."""
    return [_logical(node, ctx, "ReduceMin")]


@translator("ReduceLogicalOr", 1)
def reduce_logical_or_v1(node: Node, ctx: Context) -> list[str]:
    """ReduceLogicalOr-1 -> Cast(ReduceMax(Cast(x, uint8)), bool)."""
    return [_logical(node, ctx, "ReduceMax")]

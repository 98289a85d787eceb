"""Which element types ONNX Runtime's CPU kernels take, and how an op runs in another type when its
own has no kernel (:func:`computed_in`).

ONNX Runtime covers fewer element types than OpenVINO: a translator asks for the op in the input's
type and gets it there, or widened (integers to int32/int64, everything else to float32) and cast
back, rounded and saturated as OpenVINO's CPU plugin does when it computes in a wider type.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import TensorProto as T

from .context import Context, Node
from .dtypes import numpy_type

__all__ = [
    "FLOAT_TYPES", "SIGNED_INTS", "UNSIGNED_INTS", "ORT_F32", "ORT_FLOATS", "ORT_ARITHMETIC",
    "check_broadcast", "computed_in", "element_wise", "float_math", "scalar",
]  # fmt: skip


FLOAT_TYPES = frozenset({T.FLOAT, T.FLOAT16, T.DOUBLE, T.BFLOAT16})


SIGNED_INTS = frozenset({T.INT8, T.INT16, T.INT32, T.INT64})


UNSIGNED_INTS = frozenset({T.UINT8, T.UINT16, T.UINT32, T.UINT64})


# onnxruntime CPU kernel coverage. float16 counts as covered wherever float is: ORT inserts its own casts.
ORT_F32 = frozenset({T.FLOAT, T.FLOAT16})


ORT_FLOATS = ORT_F32 | {T.DOUBLE}


ORT_ARITHMETIC = ORT_FLOATS | {T.INT32, T.INT64}  # Pow, ReduceSum/Mean/Prod/L1/L2


# The wider integer to compute in when an integer type has no kernel.
_WIDER = {T.INT8: T.INT32, T.UINT8: T.INT32, T.INT16: T.INT32, T.UINT16: T.INT32, T.UINT32: T.INT64}


Build = Callable[[list[str], int], str]


def check_broadcast(node: Node) -> None:
    mode = node.attr("auto_broadcast", "numpy").lower()
    if mode not in ("numpy", "none"):
        raise node.error(f"auto_broadcast={mode} is not supported (expected numpy or none)")


def element_wise(node: Node, ctx: Context, onnx_op: str) -> list[str]:
    """A binary element-wise op that maps one to one onto ``onnx_op`` (numpy broadcasting in both)."""
    check_broadcast(node)
    return [ctx.b.op(onnx_op, node.inputs[:2])]


def scalar(ctx: Context, value: float, etype: int) -> str:
    """A rank-0 constant of ONNX type ``etype``."""
    return ctx.b.const(np.asarray(value, dtype=numpy_type(etype)))


def computed_in(ctx: Context, values: list[str], etype: int, kernels: frozenset[int], build: Build) -> str:
    """``build(values, type)`` in ``etype`` when ORT has a kernel for it, else in a type that has one.

    Integers widen to int32/int64 when the kernel has them, everything else goes through float32.
    Results cast back to an integer type saturate to its range, and float ones are first rounded
    half to even: that is what the OpenVINO CPU plugin does when it computes integer tensors in a
    wider type (Exp, Sigmoid, ... in f32; 8-bit sums in i32), and ONNX Cast leaves overflow undefined.
    """
    if etype in kernels:
        return build(values, etype)
    wide = _WIDER.get(etype, T.INT64 if etype not in FLOAT_TYPES else T.FLOAT)
    if wide not in kernels:
        wide = T.INT64 if T.INT64 in kernels and etype not in FLOAT_TYPES else T.FLOAT
    out = build([ctx.b.op("Cast", [v], {"to": wide}) for v in values], wide)
    if etype not in FLOAT_TYPES:
        out = _saturate(ctx, ctx.b.op("Round", [out]) if wide in FLOAT_TYPES else out, wide, etype)
    return ctx.b.op("Cast", [out], {"to": etype})


def _saturate(ctx: Context, value: str, wide: int, etype: int) -> str:
    """Clip ``value`` (of type ``wide``) to the values of integer type ``etype`` that ``wide`` can hold."""
    wide_np, info = numpy_type(wide), np.iinfo(numpy_type(etype))
    if wide_np.kind == "f":
        low, high = wide_np.type(info.min), wide_np.type(info.max)
        if int(high) > info.max:  # float(2**31 - 1) rounds up to 2**31: step down to a value that fits
            high = np.nextafter(high, wide_np.type(0))
    else:
        wide_info = np.iinfo(wide_np)
        if info.min <= wide_info.min and info.max >= wide_info.max:
            return value
        low, high = max(info.min, wide_info.min), min(info.max, wide_info.max)
    return ctx.b.op("Clip", [value, scalar(ctx, low, wide), scalar(ctx, high, wide)])


def float_math(node: Node, ctx: Context, onnx_op: str, kernels: frozenset[int], attrs: dict | None = None) -> str:
    """``onnx_op`` on input 0, through f32 (rounded back) for types ORT has no kernel for."""
    etype = node.onnx_input_type(0)
    return computed_in(ctx, [node.inputs[0]], etype, kernels, lambda v, _: ctx.b.op(onnx_op, v, attrs))

"""Element-wise binary ops with numpy broadcasting: arithmetic, comparison, logical, bitwise.

Also the dtype helpers the element-wise family shares (unary, activations, reductions): ONNX
Runtime's CPU kernels cover fewer element types than OpenVINO, so :func:`computed_in` runs an op in
the nearest type that has a kernel and casts back.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import TensorProto as T

from ..context import Context, Node
from ..dtypes import numpy_type
from ..registry import translator

__all__ = [
    "FLOAT_TYPES", "SIGNED_INTS", "UNSIGNED_INTS", "ORT_F32", "ORT_FLOATS", "ORT_ARITHMETIC",
    "check_broadcast", "computed_in", "scalar",
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


# OpenVINO type -> ONNX op, for ops that map one to one.
_BINARY = {
    "Add": "Add",
    "Subtract": "Sub",
    "Multiply": "Mul",
    "Maximum": "Max",
    "Minimum": "Min",
    "Equal": "Equal",
    "Less": "Less",
    "LessEqual": "LessOrEqual",
    "Greater": "Greater",
    "GreaterEqual": "GreaterOrEqual",
    "LogicalAnd": "And",
    "LogicalOr": "Or",
    "LogicalXor": "Xor",
}


def _binary(onnx_op: str):  # noqa: ANN202
    def translate(node: Node, ctx: Context) -> list[str]:
        check_broadcast(node)
        return [ctx.b.op(onnx_op, node.inputs[:2])]

    translate.__name__ = f"{onnx_op.lower()}_v1"
    return translate


for _ov, _onnx in _BINARY.items():
    translator(_ov, 1)(_binary(_onnx))


def _check_divisor(node: Node) -> None:
    """onnxruntime refuses a constant integer divisor holding a zero when it creates the kernel, in a
    message that names no node; say which layer it is."""
    divisor = node.const(1)
    if divisor is not None and np.asarray(divisor).dtype.kind in "iub" and not np.asarray(divisor).all():
        raise node.error("integer division by a constant divisor that holds a zero")


@translator("Divide", 1)
def divide_v1(node: Node, ctx: Context) -> list[str]:
    """Divide-1 -> Div.

    With ``m_pythondiv`` (default true) OpenVINO floors integer quotients (-7 / 2 = -4); ONNX Div
    truncates them (-3), so signed integers subtract one where the division is inexact and the signs
    differ. ``m_pythondiv=false`` truncates, as ONNX does; floats divide plainly either way. The
    OpenVINO CPU plugin truncates whatever the flag says (openvino#38248); ortstate follows the spec
    and OpenVINO's reference implementation (what constant folding computes).
    """
    check_broadcast(node)
    _check_divisor(node)
    python_div = node.attr_bool("m_pythondiv", True)
    b = ctx.b
    x, y = node.inputs[:2]
    quotient = b.op("Div", [x, y])
    etype = node.onnx_input_type(0)
    if not python_div or etype not in SIGNED_INTS:
        return [quotient]
    zero = scalar(ctx, 0, etype)
    inexact = b.op("Not", [b.op("Equal", [b.op("Mul", [quotient, y]), x])])
    signs_differ = b.op("Xor", [b.op("Less", [x, zero]), b.op("Less", [y, zero])])
    correction = b.op("Cast", [b.op("And", [inexact, signs_differ])], {"to": etype})
    return [b.op("Sub", [quotient, correction])]


@translator("Power", 1)
def power_v1(node: Node, ctx: Context) -> list[str]:
    """Power-1 -> Pow. ORT's Pow has kernels for int32/int64/floats only; other integers widen."""
    check_broadcast(node)
    pow_ = computed_in(ctx, node.inputs[:2], node.onnx_input_type(0), ORT_ARITHMETIC, lambda v, _: ctx.b.op("Pow", v))
    return [pow_]


@translator("SquaredDifference", 1)
def squared_difference_v1(node: Node, ctx: Context) -> list[str]:
    """SquaredDifference-1: (a - b)^2 as Sub then Mul (ONNX has no single op)."""
    check_broadcast(node)
    diff = ctx.b.op("Sub", node.inputs[:2])
    return [ctx.b.op("Mul", [diff, diff])]


@translator("FloorMod", 1)
def floor_mod_v1(node: Node, ctx: Context) -> list[str]:
    """FloorMod-1: the remainder takes the divisor's sign (Python ``%``).

    ONNX Mod with ``fmod=0`` is exactly that for integers but is not allowed for floats, so floats
    take the truncated ``fmod`` remainder and add the divisor where it is non-zero and its sign
    differs from the divisor's.
    """
    check_broadcast(node)
    _check_divisor(node)
    b = ctx.b
    x, y = node.inputs[:2]
    etype = node.onnx_input_type(0)
    if etype not in FLOAT_TYPES:
        return [b.op("Mod", [x, y], {"fmod": 0})]
    zero = scalar(ctx, 0, etype)
    rem = b.op("Mod", [x, y], {"fmod": 1})
    nonzero = b.op("Not", [b.op("Equal", [rem, zero])])
    signs_differ = b.op("Xor", [b.op("Less", [rem, zero]), b.op("Less", [y, zero])])
    adjust = b.op("And", [nonzero, signs_differ])
    return [b.op("Where", [adjust, b.op("Add", [rem, y]), rem])]


@translator("Mod", 1)
def mod_v1(node: Node, ctx: Context) -> list[str]:
    """Mod-1: truncated remainder with the dividend's sign (C ``fmod``) = ONNX Mod ``fmod=1``."""
    check_broadcast(node)
    _check_divisor(node)
    return [ctx.b.op("Mod", node.inputs[:2], {"fmod": 1})]


@translator("NotEqual", 1)
def not_equal_v1(node: Node, ctx: Context) -> list[str]:
    """NotEqual-1 -> Not(Equal) (ONNX has no NotEqual)."""
    check_broadcast(node)
    return [ctx.b.op("Not", [ctx.b.op("Equal", node.inputs[:2])])]


@translator("LogicalNot", 1)
def logical_not_v1(node: Node, ctx: Context) -> list[str]:
    """LogicalNot-1 -> Not. OpenVINO also accepts numbers (x == 0, in the input's type); ONNX Not is bool only."""
    etype = node.onnx_input_type(0)
    if etype == T.BOOL:
        return [ctx.b.op("Not", [node.inputs[0]])]
    is_zero = ctx.b.op("Equal", [node.inputs[0], scalar(ctx, 0, etype)])
    return [ctx.b.op("Cast", [is_zero], {"to": etype})]


def _bitwise(onnx_op: str, bool_op: str, name: str):  # noqa: ANN202
    def translate(node: Node, ctx: Context) -> list[str]:
        check_broadcast(node)
        op = bool_op if node.onnx_input_type(0) == T.BOOL else onnx_op
        return [ctx.b.op(op, node.inputs[:2])]

    translate.__name__ = name
    translate.__doc__ = f"{name}: {onnx_op} on integers, {bool_op} on bool (ONNX {onnx_op} rejects bool)."
    return translate


for _ov, _onnx, _bool in (("BitwiseAnd", "BitwiseAnd", "And"), ("BitwiseOr", "BitwiseOr", "Or"),
                          ("BitwiseXor", "BitwiseXor", "Xor")):  # fmt: skip
    translator(_ov, 13)(_bitwise(_onnx, _bool, f"{_ov.lower()}_v13"))


@translator("BitwiseNot", 13)
def bitwise_not_v13(node: Node, ctx: Context) -> list[str]:
    """BitwiseNot-13: BitwiseNot on integers, Not on bool."""
    op = "Not" if node.onnx_input_type(0) == T.BOOL else "BitwiseNot"
    return [ctx.b.op(op, [node.inputs[0]])]


# ONNX BitShift only has kernels for uint8/uint32/uint64: the unsigned type each width shifts in.
_SHIFT_CARRIER = {T.INT8: T.UINT8, T.UINT8: T.UINT8, T.INT16: T.UINT32, T.UINT16: T.UINT32,
                  T.INT32: T.UINT32, T.UINT32: T.UINT32, T.INT64: T.UINT64, T.UINT64: T.UINT64}  # fmt: skip


def _shift(node: Node, ctx: Context, direction: str) -> str:
    check_broadcast(node)
    b = ctx.b
    x, amount = node.inputs[:2]
    etype = node.onnx_input_type(0)
    carrier = _SHIFT_CARRIER.get(etype)
    if carrier is None:
        raise node.error(f"shifts need an integer input, got ONNX type {etype}")
    amount = b.op("Cast", [amount], {"to": carrier})
    if direction == "LEFT" or etype in UNSIGNED_INTS:
        # Casts wrap, so the low bits of a left shift are right whatever the carrier's width.
        shifted = b.op("BitShift", [b.op("Cast", [x], {"to": carrier}), amount], {"direction": direction})
        return b.op("Cast", [shifted], {"to": etype})
    # Arithmetic right shift of a signed x: x >> s == ~(~x >> s) for negative x, and ~x is non-negative.
    all_ones = b.op("Neg", [b.op("Cast", [b.op("Less", [x, scalar(ctx, 0, etype)])], {"to": etype})])
    magnitude = b.op("Cast", [b.op("BitwiseXor", [x, all_ones])], {"to": carrier})
    shifted = b.op("Cast", [b.op("BitShift", [magnitude, amount], {"direction": "RIGHT"})], {"to": etype})
    return b.op("BitwiseXor", [shifted, all_ones])


@translator("BitwiseLeftShift", 15)
def bitwise_left_shift_v15(node: Node, ctx: Context) -> list[str]:
    """BitwiseLeftShift-15 -> BitShift LEFT through the unsigned type of the same width.

    Shift amounts outside [0, bit width) are undefined in both OpenVINO and ONNX.
    """
    return [_shift(node, ctx, "LEFT")]


@translator("BitwiseRightShift", 15)
def bitwise_right_shift_v15(node: Node, ctx: Context) -> list[str]:
    """BitwiseRightShift-15: arithmetic (sign-filling) for signed types, logical for unsigned.

    ONNX BitShift only takes unsigned types, so signed inputs shift their complement when negative.
    The OpenVINO CPU plugin shifts u32/u64 values with the top bit set arithmetically (it runs them
    as signed); ortstate shifts unsigned types logically, as the spec and reference implementation do.
    """
    return [_shift(node, ctx, "RIGHT")]

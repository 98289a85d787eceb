"""Bitwise ops: BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitwiseLeftShift, BitwiseRightShift."""

from __future__ import annotations

from onnx import TensorProto as T

from ..context import Context, Node
from ..kernels import (
    UNSIGNED_INTS,
    check_broadcast,
    scalar,
)
from ..registry import translator


def _bitwise(node: Node, ctx: Context, onnx_op: str, bool_op: str) -> list[str]:
    check_broadcast(node)
    op = bool_op if node.onnx_input_type(0) == T.BOOL else onnx_op
    return [ctx.b.op(op, node.inputs[:2])]


@translator("BitwiseAnd", 13)
def bitwise_and_v13(node: Node, ctx: Context) -> list[str]:
    """BitwiseAnd-13: BitwiseAnd on integers, And on bool (ONNX BitwiseAnd rejects bool)."""
    return _bitwise(node, ctx, "BitwiseAnd", "And")


@translator("BitwiseOr", 13)
def bitwise_or_v13(node: Node, ctx: Context) -> list[str]:
    """BitwiseOr-13: BitwiseOr on integers, Or on bool (ONNX BitwiseOr rejects bool)."""
    return _bitwise(node, ctx, "BitwiseOr", "Or")


@translator("BitwiseXor", 13)
def bitwise_xor_v13(node: Node, ctx: Context) -> list[str]:
    """BitwiseXor-13: BitwiseXor on integers, Xor on bool (ONNX BitwiseXor rejects bool)."""
    return _bitwise(node, ctx, "BitwiseXor", "Xor")


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

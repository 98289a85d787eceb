"""Element-wise arithmetic with numpy broadcasting: Add, Subtract, Divide, Power, Maximum,
Minimum, SquaredDifference, FloorMod, Mod (Multiply is in ``rms_norm``, which fuses the RMS norms
it closes).
"""

from __future__ import annotations

import numpy as np

from ..context import Context, Node
from ..kernels import (
    FLOAT_TYPES,
    ORT_ARITHMETIC,
    SIGNED_INTS,
    check_broadcast,
    computed_in,
    element_wise,
    scalar,
)
from ..registry import translator


@translator("Add", 1)
def add_v1(node: Node, ctx: Context) -> list[str]:
    """Add-1 -> Add (numpy broadcasting in both)."""
    return element_wise(node, ctx, "Add")


@translator("Subtract", 1)
def subtract_v1(node: Node, ctx: Context) -> list[str]:
    """Subtract-1 -> Sub (numpy broadcasting in both)."""
    return element_wise(node, ctx, "Sub")


@translator("Maximum", 1)
def maximum_v1(node: Node, ctx: Context) -> list[str]:
    """Maximum-1 -> Max (numpy broadcasting in both)."""
    return element_wise(node, ctx, "Max")


@translator("Minimum", 1)
def minimum_v1(node: Node, ctx: Context) -> list[str]:
    """Minimum-1 -> Min (numpy broadcasting in both)."""
    return element_wise(node, ctx, "Min")


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

"""Element-wise unary math: Abs, Negative, Sign, Exp, Log, Sqrt, trigonometry, Floor, Ceiling, Round, Clamp.

OpenVINO defines most of these for every numeric type; ONNX (and ONNX Runtime's kernels) mostly for
floats. On integers the OpenVINO CPU plugin computes float math in f32 and rounds the result half to
even (Sqrt's spec says "rounded", exp(1) gives 3), which :func:`computed_in` reproduces.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as T

from ..context import Context, Node
from ..dtypes import numpy_type
from ..registry import translator
from .elementwise import FLOAT_TYPES, ORT_F32, ORT_FLOATS, computed_in, scalar

__all__ = ["float_math"]

_ANY_NUMBER = frozenset(ORT_FLOATS | {T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64})
_SIGNED_NUMBER = frozenset(ORT_FLOATS | {T.INT8, T.INT16, T.INT32, T.INT64})

# OpenVINO type -> (ONNX op, the types ORT has kernels for, first OpenVINO version).
_UNARY = {
    "Abs": ("Abs", _ANY_NUMBER, 1),
    "Negative": ("Neg", _SIGNED_NUMBER, 1),
    "Sign": ("Sign", _ANY_NUMBER, 1),
    "Exp": ("Exp", ORT_FLOATS, 1),
    "Log": ("Log", ORT_FLOATS, 1),
    "Sqrt": ("Sqrt", ORT_FLOATS, 1),
    "Erf": ("Erf", ORT_F32, 1),
    "Sin": ("Sin", ORT_FLOATS, 1),
    "Cos": ("Cos", ORT_FLOATS, 1),
    "Tan": ("Tan", ORT_F32, 1),
    "Asin": ("Asin", ORT_F32, 1),
    "Acos": ("Acos", ORT_F32, 1),
    "Atan": ("Atan", ORT_F32, 1),
    "Sinh": ("Sinh", ORT_F32, 1),
    "Cosh": ("Cosh", ORT_F32, 1),
    "Asinh": ("Asinh", ORT_F32, 3),
    "Acosh": ("Acosh", ORT_F32, 3),
    "Atanh": ("Atanh", ORT_F32, 3),
    "SoftSign": ("Softsign", ORT_F32, 9),
}


def float_math(node: Node, ctx: Context, onnx_op: str, kernels: frozenset[int], attrs: dict | None = None) -> str:
    """``onnx_op`` on input 0, through f32 (rounded back) for types ORT has no kernel for."""
    etype = node.onnx_input_type(0)
    return computed_in(ctx, [node.inputs[0]], etype, kernels, lambda v, _: ctx.b.op(onnx_op, v, attrs))


def _unary(onnx_op: str, kernels: frozenset[int], name: str):  # noqa: ANN202
    def translate(node: Node, ctx: Context) -> list[str]:
        return [float_math(node, ctx, onnx_op, kernels)]

    translate.__name__ = name
    translate.__doc__ = f"{name} -> {onnx_op}; integer inputs without an ORT kernel go through f32 and round back."
    return translate


for _ov, (_onnx, _kernels, _since) in _UNARY.items():
    translator(_ov, _since)(_unary(_onnx, _kernels, f"{_ov.lower()}_v{_since}"))


def _integral_identity(node: Node, ctx: Context, onnx_op: str, attrs: dict | None = None) -> str:
    """Floor, Ceiling and Round leave integers as they are; ONNX defines them for floats only."""
    if node.onnx_input_type(0) not in FLOAT_TYPES:
        return ctx.b.op("Identity", [node.inputs[0]])
    return float_math(node, ctx, onnx_op, ORT_FLOATS, attrs)


@translator("Floor", 1)
def floor_v1(node: Node, ctx: Context) -> list[str]:
    """Floor-1 -> Floor; identity on integers (ONNX Floor is float only)."""
    return [_integral_identity(node, ctx, "Floor")]


@translator("Ceiling", 1)
def ceiling_v1(node: Node, ctx: Context) -> list[str]:
    """Ceiling-1 -> Ceil; identity on integers (ONNX Ceil is float only)."""
    return [_integral_identity(node, ctx, "Ceil")]


@translator("Round", 5)
def round_v5(node: Node, ctx: Context) -> list[str]:
    """Round-5. ``half_to_even`` is ONNX Round; ``half_away_from_zero`` (2.5 -> 3, -2.5 -> -3) has no ONNX op.

    Away from zero is ``sign(x) * (floor(|x|) + (frac(|x|) >= 0.5))``: exact, unlike
    ``floor(|x| + 0.5)``, which rounds 0.49999997 up in f32. Integers pass through.
    """
    mode = node.attr_choice("mode", ("half_to_even", "half_away_from_zero"))
    etype = node.onnx_input_type(0)
    if mode == "half_to_even" or etype not in FLOAT_TYPES:
        return [_integral_identity(node, ctx, "Round")]

    def away(values: list[str], ftype: int) -> str:
        b = ctx.b
        magnitude = b.op("Abs", values)
        whole = b.op("Floor", [magnitude])
        half_up = b.op("GreaterOrEqual", [b.op("Sub", [magnitude, whole]), scalar(ctx, 0.5, ftype)])
        rounded = b.op("Add", [whole, b.op("Cast", [half_up], {"to": ftype})])
        return b.op("Mul", [b.op("Sign", values), rounded])

    return [computed_in(ctx, [node.inputs[0]], etype, ORT_FLOATS, away)]


def _integer_bounds(node: Node, low: float, high: float, etype: int) -> tuple[int, int]:
    """Clamp's float bounds on an integer type: min rounds up, max down, both saturate to the type's range."""
    info = np.iinfo(numpy_type(etype))
    lo = info.min if low <= info.min else info.max if low >= info.max else math.ceil(low)
    hi = info.max if high >= info.max else info.min if high <= info.min else math.floor(high)
    if lo > hi:
        raise node.error(f"min={low} and max={high} leave no {info.dtype} value between them")
    return lo, hi


@translator("Clamp", 1)
def clamp_v1(node: Node, ctx: Context) -> list[str]:
    """Clamp-1 (``min``/``max`` attributes) -> Clip (bounds as inputs, in the data's type).

    For integer data OpenVINO rounds ``min`` up and ``max`` down (Clamp(x, -1.5, 2.5) keeps -1..2),
    which the bounds here are converted with; float bounds on float data are used as written.
    """
    low, high = node.attr_float("min"), node.attr_float("max")
    if low > high:
        raise node.error(f"min={low} is greater than max={high}")
    etype = node.onnx_input_type(0)
    if etype in FLOAT_TYPES:

        def clip(values: list[str], ftype: int) -> str:
            return ctx.b.op("Clip", [values[0], scalar(ctx, low, ftype), scalar(ctx, high, ftype)])

        return [computed_in(ctx, [node.inputs[0]], etype, ORT_FLOATS, clip)]
    lo, hi = _integer_bounds(node, low, high, etype)
    return [ctx.b.op("Clip", [node.inputs[0], scalar(ctx, lo, etype), scalar(ctx, hi, etype)])]

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
from ..kernels import FLOAT_TYPES, ORT_F32, ORT_FLOATS, computed_in, float_math, scalar
from ..registry import translator

_ANY_NUMBER = frozenset(ORT_FLOATS | {T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64})
_SIGNED_NUMBER = frozenset(ORT_FLOATS | {T.INT8, T.INT16, T.INT32, T.INT64})

# Unary math that maps one to one: integer inputs without an ORT kernel go through f32 and round
# back (:func:`~ortstate.convert.kernels.computed_in`), as OpenVINO's CPU plugin does.


@translator("Abs", 1)
def abs_v1(node: Node, ctx: Context) -> list[str]:
    """Abs-1 -> Abs."""
    return [float_math(node, ctx, "Abs", _ANY_NUMBER)]


@translator("Negative", 1)
def negative_v1(node: Node, ctx: Context) -> list[str]:
    """Negative-1 -> Neg."""
    return [float_math(node, ctx, "Neg", _SIGNED_NUMBER)]


@translator("Sign", 1)
def sign_v1(node: Node, ctx: Context) -> list[str]:
    """Sign-1 -> Sign."""
    return [float_math(node, ctx, "Sign", _ANY_NUMBER)]


@translator("Exp", 1)
def exp_v1(node: Node, ctx: Context) -> list[str]:
    """Exp-1 -> Exp."""
    return [float_math(node, ctx, "Exp", ORT_FLOATS)]


@translator("Log", 1)
def log_v1(node: Node, ctx: Context) -> list[str]:
    """Log-1 -> Log."""
    return [float_math(node, ctx, "Log", ORT_FLOATS)]


@translator("Sqrt", 1)
def sqrt_v1(node: Node, ctx: Context) -> list[str]:
    """Sqrt-1 -> Sqrt."""
    return [float_math(node, ctx, "Sqrt", ORT_FLOATS)]


@translator("Erf", 1)
def erf_v1(node: Node, ctx: Context) -> list[str]:
    """Erf-1 -> Erf."""
    return [float_math(node, ctx, "Erf", ORT_F32)]


@translator("Sin", 1)
def sin_v1(node: Node, ctx: Context) -> list[str]:
    """Sin-1 -> Sin."""
    return [float_math(node, ctx, "Sin", ORT_FLOATS)]


@translator("Cos", 1)
def cos_v1(node: Node, ctx: Context) -> list[str]:
    """Cos-1 -> Cos."""
    return [float_math(node, ctx, "Cos", ORT_FLOATS)]


@translator("Tan", 1)
def tan_v1(node: Node, ctx: Context) -> list[str]:
    """Tan-1 -> Tan."""
    return [float_math(node, ctx, "Tan", ORT_F32)]


@translator("Asin", 1)
def asin_v1(node: Node, ctx: Context) -> list[str]:
    """Asin-1 -> Asin."""
    return [float_math(node, ctx, "Asin", ORT_F32)]


@translator("Acos", 1)
def acos_v1(node: Node, ctx: Context) -> list[str]:
    """Acos-1 -> Acos."""
    return [float_math(node, ctx, "Acos", ORT_F32)]


@translator("Atan", 1)
def atan_v1(node: Node, ctx: Context) -> list[str]:
    """Atan-1 -> Atan."""
    return [float_math(node, ctx, "Atan", ORT_F32)]


@translator("Sinh", 1)
def sinh_v1(node: Node, ctx: Context) -> list[str]:
    """Sinh-1 -> Sinh."""
    return [float_math(node, ctx, "Sinh", ORT_F32)]


@translator("Cosh", 1)
def cosh_v1(node: Node, ctx: Context) -> list[str]:
    """Cosh-1 -> Cosh."""
    return [float_math(node, ctx, "Cosh", ORT_F32)]


@translator("Asinh", 3)
def asinh_v3(node: Node, ctx: Context) -> list[str]:
    """Asinh-3 -> Asinh."""
    return [float_math(node, ctx, "Asinh", ORT_F32)]


@translator("Acosh", 3)
def acosh_v3(node: Node, ctx: Context) -> list[str]:
    """Acosh-3 -> Acosh."""
    return [float_math(node, ctx, "Acosh", ORT_F32)]


@translator("Atanh", 3)
def atanh_v3(node: Node, ctx: Context) -> list[str]:
    """Atanh-3 -> Atanh."""
    return [float_math(node, ctx, "Atanh", ORT_F32)]


@translator("SoftSign", 9)
def soft_sign_v9(node: Node, ctx: Context) -> list[str]:
    """SoftSign-9 -> Softsign."""
    return [float_math(node, ctx, "Softsign", ORT_F32)]


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

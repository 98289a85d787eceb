"""Activations: ReLU, Sigmoid, Tanh, Elu, PReLU, Swish, HSwish, HSigmoid, Mish, SoftPlus, Gelu, Selu, HardSigmoid.

Where OpenVINO passes a parameter as an input (Selu's alpha/lambda, HardSigmoid's alpha/beta) and
ONNX wants an attribute, constant inputs become attributes and run-time ones a decomposition.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ..context import Context, Node
from ..kernels import FLOAT_TYPES, ORT_F32, ORT_FLOATS, computed_in, float_math, scalar
from ..registry import translator


@translator("Sigmoid", 1)
def sigmoid_v1(node: Node, ctx: Context) -> list[str]:
    """Sigmoid-1 -> Sigmoid; integer inputs go through f32 and round back, as on OpenVINO's CPU."""
    return [float_math(node, ctx, "Sigmoid", ORT_FLOATS)]


@translator("Tanh", 1)
def tanh_v1(node: Node, ctx: Context) -> list[str]:
    """Tanh-1 -> Tanh; integer inputs go through f32 and round back, as on OpenVINO's CPU."""
    return [float_math(node, ctx, "Tanh", ORT_FLOATS)]


@translator("HSwish", 4)
def h_swish_v4(node: Node, ctx: Context) -> list[str]:
    """HSwish-4 -> HardSwish; integer inputs go through f32 and round back, as on OpenVINO's CPU."""
    return [float_math(node, ctx, "HardSwish", ORT_F32)]


@translator("HSigmoid", 5)
def h_sigmoid_v5(node: Node, ctx: Context) -> list[str]:
    """HSigmoid-5 -> HardSigmoid (min(max(x + 3, 0), 6) / 6); integer inputs go through f32 and round
    back, as on OpenVINO's CPU."""
    return [float_math(node, ctx, "HardSigmoid", ORT_F32, {"alpha": 1.0 / 6.0, "beta": 0.5})]


@translator("Mish", 4)
def mish_v4(node: Node, ctx: Context) -> list[str]:
    """Mish-4 -> Mish; integer inputs go through f32 and round back, as on OpenVINO's CPU."""
    return [float_math(node, ctx, "Mish", ORT_F32)]


@translator("SoftPlus", 4)
def soft_plus_v4(node: Node, ctx: Context) -> list[str]:
    """SoftPlus-4 -> Softplus; integer inputs go through f32 and round back, as on OpenVINO's CPU."""
    return [float_math(node, ctx, "Softplus", ORT_F32)]


# Max has no int16/uint16 kernel in ORT; Relu only float, int8 and int32 ones.
_MAX_KERNELS = ORT_FLOATS | {T.INT8, T.UINT8, T.INT32, T.UINT32, T.INT64, T.UINT64}


@translator("ReLU", 1)
def relu_v1(node: Node, ctx: Context) -> list[str]:
    """ReLU-1 -> Relu on floats, Max(x, 0) on integers."""
    etype = node.onnx_input_type(0)
    if etype in FLOAT_TYPES:
        return [float_math(node, ctx, "Relu", ORT_FLOATS)]

    def relu(values: list[str], itype: int) -> str:
        return ctx.b.op("Max", [values[0], scalar(ctx, 0, itype)])

    return [computed_in(ctx, [node.inputs[0]], etype, _MAX_KERNELS, relu)]


@translator("Elu", 1)
def elu_v1(node: Node, ctx: Context) -> list[str]:
    """Elu-1 (``alpha`` attribute) -> Elu."""
    return [float_math(node, ctx, "Elu", ORT_F32, {"alpha": node.attr_float("alpha")})]


def _channel_slope(node: Node, ctx: Context) -> str:
    """PReLU's slope laid out for numpy broadcasting.

    OpenVINO applies a 1-D slope whose length equals the data's dim 1 per channel (axis 1), else
    numpy-style from the right; ONNX PRelu only broadcasts numpy-style. A channel slope becomes
    ``[C, 1, ..., 1]``. When dim 1 is only known at run time, both layouts are built and chosen then.
    """
    b = ctx.b
    slope = node.inputs[1]
    rank = node.input_rank(0)
    if rank < 3 or node.input_rank(1) != 1:
        return slope
    ones = [1] * (rank - 2)
    channels = node.input_shape(0).dims[1]  # type: ignore[index]
    length = node.input_shape(1).dims[0]  # type: ignore[index]
    if channels.is_static and length.is_static:
        per_channel = channels.lo == length.lo
        return b.op("Reshape", [slope, b.const(np.array([-1, *ones], np.int64))]) if per_channel else slope
    slope_len = b.op("Shape", [slope])
    dim1 = b.op("Shape", [node.inputs[0]], {"start": 1, "end": 2})
    as_channels = b.op("Concat", [slope_len, b.const(np.array(ones, np.int64))], {"axis": 0})
    from_right = b.op("Concat", [b.const(np.array(ones, np.int64)), slope_len], {"axis": 0})
    shape = b.op("Where", [b.op("Equal", [slope_len, dim1]), as_channels, from_right])
    return b.op("Reshape", [slope, shape])


@translator("PReLU", 1)
def prelu_v1(node: Node, ctx: Context) -> list[str]:
    """PReLU-1 -> PRelu, the slope reshaped for OpenVINO's per-channel broadcasting (see _channel_slope)."""
    slope = _channel_slope(node, ctx)
    etype = node.onnx_input_type(0)
    return [computed_in(ctx, [node.inputs[0], slope], etype, ORT_F32, lambda v, _: ctx.b.op("PRelu", v))]


@translator("Swish", 4)
def swish_v4(node: Node, ctx: Context) -> list[str]:
    """Swish-4: x * sigmoid(beta * x), ``beta`` an optional scalar input (default 1). ONNX 21 has no Swish."""
    b = ctx.b

    def swish(values: list[str], _: int) -> str:
        x = values[0]
        scaled = b.op("Mul", [x, values[1]]) if len(values) > 1 else x
        return b.op("Mul", [x, b.op("Sigmoid", [scaled])])

    return [computed_in(ctx, node.inputs[:2], node.onnx_input_type(0), ORT_FLOATS, swish)]


@translator("Gelu", 2)
def gelu_v2(node: Node, ctx: Context) -> list[str]:
    """Gelu-2: the erf form, ONNX Gelu ``approximate="none"``."""
    return [float_math(node, ctx, "Gelu", ORT_F32, {"approximate": "none"})]


@translator("Gelu", 7)
def gelu_v7(node: Node, ctx: Context) -> list[str]:
    """Gelu-7: ``approximation_mode`` ERF / TANH -> ONNX Gelu ``approximate`` "none" / "tanh"."""
    mode = node.attr_choice("approximation_mode", ("erf", "tanh"), "ERF")
    return [float_math(node, ctx, "Gelu", ORT_F32, {"approximate": "none" if mode == "erf" else "tanh"})]


def _scalar_input(node: Node, i: int, what: str) -> float | None:
    value = node.const(i)
    if value is None:
        return None
    if np.asarray(value).size != 1:
        raise node.error(f"input {i} ({what}) expected one element, got shape {list(np.shape(value))}")
    return float(np.asarray(value).reshape(-1)[0])


@translator("Selu", 1)
def selu_v1(node: Node, ctx: Context) -> list[str]:
    """Selu-1: lambda * (x > 0 ? x : alpha * (exp(x) - 1)), alpha and lambda as inputs 1 and 2.

    ONNX Selu takes them as attributes (``alpha``, ``gamma``): constants map there, run-time values
    are computed with Where/Exp.
    """
    alpha, lam = _scalar_input(node, 1, "alpha"), _scalar_input(node, 2, "lambda")
    if alpha is not None and lam is not None:
        return [float_math(node, ctx, "Selu", ORT_F32, {"alpha": alpha, "gamma": lam})]
    b = ctx.b

    def selu(values: list[str], ftype: int) -> str:
        x, alpha_, lambda_ = values
        negative = b.op("Mul", [alpha_, b.op("Sub", [b.op("Exp", [x]), scalar(ctx, 1, ftype)])])
        positive = b.op("Greater", [x, scalar(ctx, 0, ftype)])
        return b.op("Mul", [lambda_, b.op("Where", [positive, x, negative])])

    return [computed_in(ctx, node.inputs[:3], node.onnx_input_type(0), ORT_FLOATS, selu)]


@translator("HardSigmoid", 1)
def hard_sigmoid_v1(node: Node, ctx: Context) -> list[str]:
    """HardSigmoid-1: max(0, min(1, alpha * x + beta)), alpha and beta as inputs 1 and 2.

    ONNX HardSigmoid takes them as attributes: constants map there, run-time values are computed.
    """
    alpha, beta = _scalar_input(node, 1, "alpha"), _scalar_input(node, 2, "beta")
    if alpha is not None and beta is not None:
        return [float_math(node, ctx, "HardSigmoid", ORT_F32, {"alpha": alpha, "beta": beta})]
    b = ctx.b

    def hard_sigmoid(values: list[str], ftype: int) -> str:
        x, alpha_, beta_ = values
        line = b.op("Add", [b.op("Mul", [alpha_, x]), beta_])
        return b.op("Max", [b.op("Min", [line, scalar(ctx, 1, ftype)]), scalar(ctx, 0, ftype)])

    return [computed_in(ctx, node.inputs[:3], node.onnx_input_type(0), ORT_FLOATS, hard_sigmoid)]

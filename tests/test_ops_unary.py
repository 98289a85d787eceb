"""Unary math, activation and SoftMax translators against the OpenVINO CPU plugin.

Integer inputs to float math (Exp, Sin, Sigmoid, ...) are part of OpenVINO's op set: the CPU plugin
computes them in f32 and rounds, which the integer cases pin.
"""

import re

import numpy as np
import openvino.opset1 as ops1
import openvino.opset2 as ops2
import openvino.opset13 as ops
import pytest
from oracle import assert_close, check_model, open_session, single_op
from test_ops_elementwise import check_spec

import ortstate
from ortstate.errors import ConversionError

FLOATS = [np.float32, np.float16, np.float64]
INTS = [np.int32, np.int64, np.int8, np.uint8, np.int16]

# op: (float values, integer values or None where OpenVINO has no integer form worth testing)
UNARY = {
    "abs": ([-3.5, -1.0, 0.0, 2.0, 7.25], [-5, -1, 0, 1, 7, 127]),
    "negative": ([-3.5, -1.0, 0.0, 2.0, 7.25], [-5, -1, 0, 1, 7, 127]),
    "sign": ([-3.5, -1e-3, 0.0, 2.0, 7.25], [-5, -1, 0, 1, 7]),
    "exp": ([-3.0, -1.0, 0.0, 0.5, 2.0, 5.0], [-3, -1, 0, 1, 2, 4]),
    "log": ([0.1, 1.0, 2.5, 10.0, 1e3], [1, 2, 3, 10, 100]),
    "sqrt": ([0.0, 0.25, 2.0, 9.0, 1e4], [0, 1, 2, 3, 7, 10, 100]),
    "erf": ([-2.0, -0.5, 0.0, 0.3, 1.5], [-3, -1, 0, 1, 3]),
    "sin": ([-3.0, -1.0, 0.0, 0.5, 1.2, 3.0], [-3, -1, 0, 1, 2, 5, 8]),
    "cos": ([-3.0, -1.0, 0.0, 0.5, 1.2, 3.0], [-3, -1, 0, 1, 2, 5, 8]),
    "tan": ([-1.2, -1.0, 0.0, 0.5, 1.2, 3.0], [-3, -1, 0, 1, 2, 3]),
    "asin": ([-0.9, -0.5, 0.0, 0.3, 0.99], [-1, 0, 1]),
    "acos": ([-0.9, -0.5, 0.0, 0.3, 0.99], [-1, 0, 1]),
    "atan": ([-5.0, -1.0, 0.0, 0.5, 10.0], [-5, -1, 0, 1, 10]),
    "sinh": ([-3.0, -1.0, 0.0, 0.5, 2.0], [-5, -1, 0, 1, 2, 4]),
    "cosh": ([-3.0, -1.0, 0.0, 0.5, 2.0], [-5, -1, 0, 1, 2, 4]),
    "asinh": ([-5.0, -1.0, 0.0, 0.5, 10.0], [-5, -1, 0, 1, 10]),
    "acosh": ([1.0, 1.5, 3.0, 10.0], [1, 2, 3, 10]),
    "atanh": ([-0.9, -0.5, 0.0, 0.3, 0.99], None),
    "floor": ([-2.5, -1.0, -0.2, 0.0, 0.7, 3.5], [-5, -1, 0, 1, 7]),
    "ceiling": ([-2.5, -1.0, -0.2, 0.0, 0.7, 3.5], [-5, -1, 0, 1, 7]),
    "softsign": ([-10.0, -1.0, 0.0, 0.5, 3.0], None),
    # activations
    "relu": ([-2.0, -0.5, 0.0, 0.5, 3.0], [-5, -1, 0, 1, 7]),
    "sigmoid": ([-6.0, -1.0, 0.0, 0.5, 3.0], [-5, -1, 1, 2, 7]),
    "tanh": ([-6.0, -1.0, 0.0, 0.5, 3.0], [-5, -1, 0, 1, 7]),
    "hswish": ([-4.0, -3.0, -1.0, 0.0, 0.5, 3.0, 5.0], [-5, -3, -1, 0, 1, 2, 7]),
    "hsigmoid": ([-4.0, -3.0, -1.0, 0.0, 0.5, 3.0, 5.0], [-5, -3, -1, 1, 2, 7]),
    "mish": ([-6.0, -1.0, 0.0, 0.5, 3.0, 30.0], None),
    "softplus": ([-30.0, -6.0, -1.0, 0.0, 0.5, 3.0, 30.0, 100.0], None),
}
NO_UNSIGNED = {"negative"}
# (op, dtype) pairs OpenVINO defines: float math on integers too, except where it says floats only.
UNARY_CASES = [
    (op, dtype)
    for op, (_, ints) in UNARY.items()
    for dtype in FLOATS + INTS
    if np.issubdtype(dtype, np.floating)
    or (ints is not None and not (op in NO_UNSIGNED and np.issubdtype(dtype, np.unsignedinteger)))
]


def run_unary(tmp_path, make, values: np.ndarray, rtol: float = 1e-5) -> None:
    x = ops.parameter(values.shape, values.dtype, name="x")
    check_model(single_op(tmp_path, make(x), [x]), {"x": values}, rtol=rtol, atol=rtol)


def values_of(op: str, dtype) -> np.ndarray:
    floats, ints = UNARY[op]
    if np.issubdtype(dtype, np.floating):
        return np.array(floats, dtype).reshape(1, -1)
    assert ints is not None
    ints = [v for v in ints if v >= 0] if np.issubdtype(dtype, np.unsignedinteger) else ints
    return np.array(ints, dtype).reshape(1, -1)


@pytest.mark.parametrize(("op", "dtype"), UNARY_CASES)
def test_unary(tmp_path, op, dtype):
    values = values_of(op, dtype)
    run_unary(tmp_path, getattr(ops, op), values, rtol=1e-3 if dtype == np.float16 else 1e-5)


def test_integer_float_math_rounds(tmp_path):
    """exp(1) = 2.718 gives 3 and sigmoid(0) = 0.5 gives 0: rounded half to even, not truncated."""
    values = np.array([1, 0], np.int32)
    x = ops.parameter([2], np.int32, name="x")
    out = check_model(single_op(tmp_path, [ops.exp(x), ops.sigmoid(x)], [x]), {"x": values})
    np.testing.assert_array_equal(np.stack(out), [[3, 1], [1, 0]])


ROUNDING = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1.4, -1.6, 3.0, 0.0, 8388609.0, -7.5, 0.49, -0.51]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int8])
@pytest.mark.parametrize("mode", ["half_to_even", "half_away_from_zero"])
def test_round(tmp_path, mode, dtype):
    if np.issubdtype(dtype, np.integer):
        values = np.array([-7, -1, 0, 1, 100], dtype)
    else:
        values = np.array([v for v in ROUNDING if dtype != np.float16 or abs(v) < 2048], dtype)
    run_unary(tmp_path, lambda x: ops.round(x, mode), values)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_away_just_below_half(tmp_path, dtype):
    """0.49999997 rounds to 0. The CPU plugin says 1 (it computes floor(|x| + 0.5)); the reference says 0."""
    values = np.array([0.49999997, -0.49999997, 2.4999998, 0.5, -2.5], dtype)
    want = np.array([0, -0, 2, 1, -3], dtype)
    check_spec(tmp_path, lambda x: ops.round(x, "half_away_from_zero"), values, want=want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("bounds", [(-2.5, 2.5), (-1.5, 3.5), (-2.6, 2.4), (0.5, 1.5), (-1000.0, 1000.0), (-1.0, -1.0)])
def test_clamp(tmp_path, bounds, dtype):
    values = np.array([-200, -5, -3, -2, -1, 0, 1, 2, 3, 4, 5, 120], np.float64)
    if np.issubdtype(dtype, np.floating):
        values = np.concatenate([values, [-2.55, 2.45, 0.5, -1.5]])
    elif np.issubdtype(dtype, np.unsignedinteger):
        values = np.abs(values)
    values = values.astype(dtype)
    if np.dtype(dtype).itemsize == 1 and (bounds[0] > 0 or bounds[1] < 0) and bounds[0] != int(bounds[0]):
        # The CPU plugin truncates fractional bounds for 8-bit data; the spec rounds min up and max down.
        info = np.iinfo(dtype)
        lo, hi = max(np.ceil(bounds[0]), info.min), min(np.floor(bounds[1]), info.max)
        check_spec(tmp_path, lambda x: ops.clamp(x, *bounds), values, want=np.clip(values, lo, hi).astype(dtype))
    else:
        run_unary(tmp_path, lambda x: ops.clamp(x, *bounds), values)


@pytest.mark.parametrize("mode", ["erf", "tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu(tmp_path, mode, dtype):
    values = np.array([-5.0, -1.5, -0.5, 0.0, 0.3, 1.0, 4.0], dtype)
    run_unary(tmp_path, lambda x: ops.gelu(x, mode), values, rtol=1e-3 if dtype == np.float16 else 1e-5)


def test_gelu_v2(tmp_path):
    run_unary(tmp_path, ops2.gelu, np.array([-5.0, -1.5, -0.5, 0.0, 0.3, 1.0, 4.0], np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.5])
def test_elu(tmp_path, alpha, dtype):
    values = np.array([-6, -2, -1, 0, 1, 3], dtype)
    if np.issubdtype(dtype, np.floating):
        values = values * np.array(0.7, dtype)
    run_unary(tmp_path, lambda x: ops.elu(x, alpha), values, rtol=1e-3 if dtype == np.float16 else 1e-5)


# (data shape, slope shape): 1-D slopes matching dim 1 apply per channel, the rest broadcast numpy-style.
PRELU_SHAPES = [
    ([2, 3, 4], [3]),
    ([2, 3, 4], [4]),
    ([2, 3, 3], [3]),
    ([2, 3, 4, 5], [3]),
    ([2, 3, 4, 5], [5]),
    ([2, 3, 4], [1]),
    ([2, 3, 4], [3, 1]),
    ([2, 3, 4], [2, 3, 4]),
    ([4, 3], [3]),
    ([3], [3]),
    ([-1, 3, 4], [3]),
    ([2, -1, 4], [3]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("shapes", PRELU_SHAPES, ids=str)
def test_prelu(tmp_path, shapes, dtype):
    data_shape, slope_shape = shapes
    feed_shape = [2 if d == -1 and i == 0 else 3 if d == -1 else d for i, d in enumerate(data_shape)]
    values = (np.arange(np.prod(feed_shape)) - np.prod(feed_shape) // 2).reshape(feed_shape).astype(dtype)
    slope = (np.arange(np.prod(slope_shape)) + 2).reshape(slope_shape).astype(dtype)
    if dtype == np.float32:
        slope = slope * np.float32(0.1)
    x = ops.parameter(data_shape, dtype, name="x")
    xml = single_op(tmp_path, ops.prelu(x, ops.constant(slope)), [x])
    check_model(xml, {"x": values})


def prelu_spec(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    if x.ndim >= 2 and slope.ndim == 1 and slope.size == x.shape[1]:
        slope = slope.reshape(-1, *[1] * (x.ndim - 2))
    return np.where(x < 0, x * slope, x)


@pytest.mark.parametrize(("slope_len", "channels"), [(3, 3), (4, 4), (4, 3)])
def test_prelu_dynamic_channels(tmp_path, slope_len, channels):
    """Dim 1 unknown until run time: the slope applies per channel exactly when its length matches it.

    The CPU plugin cannot run the numpy-style case with a dynamic dim 1, so numpy is the oracle.
    """
    slope = (np.arange(slope_len, dtype=np.float32) + 1) * np.float32(0.1)
    x = ops.parameter([2, -1, 4], np.float32, name="x")
    xml = single_op(tmp_path, ops.prelu(x, ops.constant(slope)), [x])
    values = (np.arange(8 * channels, dtype=np.float32) - 4 * channels).reshape(2, channels, 4)
    for explicit in (False, True):
        session = open_session(xml, explicit)
        assert_close(session.run(None, {"x": values})[0], prelu_spec(values, slope), f"explicit_state={explicit}")


# openvino's swish() without beta adds an f32 one, which OpenVINO then rejects for other types.
SWISH_CASES = [(None, np.float32)] + [(beta, dtype) for beta in (1.0, 0.5, 2.0) for dtype in (np.float32, np.float16)]


@pytest.mark.parametrize(("beta", "dtype"), SWISH_CASES)
def test_swish(tmp_path, beta, dtype):
    values = np.array([-6.0, -1.0, 0.0, 0.5, 3.0, 30.0], dtype)
    make = (lambda x: ops.swish(x)) if beta is None else (lambda x: ops.swish(x, ops.constant(np.array(beta, dtype))))
    run_unary(tmp_path, make, values, rtol=1e-3 if dtype == np.float16 else 1e-5)


def test_swish_runtime_beta(tmp_path):
    x = ops.parameter([2, 3], np.float32, name="x")
    beta = ops.parameter([], np.float32, name="beta")
    xml = single_op(tmp_path, ops.swish(x, beta), [x, beta])
    values = np.array([[-6.0, -1.0, 0.0], [0.5, 3.0, 30.0]], np.float32)
    for b in (0.5, 1.0, 2.5):
        check_model(xml, {"x": values, "beta": np.array(b, np.float32)})


SELU_INPUT = np.array([[-5, -1, -0.2, 0], [0.1, 1, 3, 20]], np.float32)


def selu_spec(x: np.ndarray, alpha: float, lam: float) -> np.ndarray:
    return (lam * np.where(x > 0, x, alpha * (np.exp(x) - 1))).astype(x.dtype)


def hard_sigmoid_spec(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return np.clip(alpha * x + beta, 0, 1).astype(x.dtype)


@pytest.mark.parametrize("params", [(1.6732632, 1.050701), (0.5, 2.0)])
def test_selu(tmp_path, params):
    alpha, lam = (ops.constant(np.array([v], np.float32)) for v in params)
    x = ops.parameter([2, 4], np.float32, name="x")
    check_model(single_op(tmp_path, ops.selu(x, alpha, lam), [x]), {"x": SELU_INPUT})


@pytest.mark.parametrize("params", [(0.2, 0.5), (1.0, 0.1), (-0.5, 0.25), (1.0, 0.0)])
def test_hard_sigmoid(tmp_path, params):
    alpha, beta = (ops.constant(np.array(v, np.float32)) for v in params)
    x = ops.parameter([2, 4], np.float32, name="x")
    if params[1] == 0:  # the CPU plugin runs beta = 0 as beta = 0.5
        want = hard_sigmoid_spec(SELU_INPUT, *params)
        check_spec(tmp_path, lambda x: ops.hard_sigmoid(x, alpha, beta), SELU_INPUT, want=want)
    else:
        check_model(single_op(tmp_path, ops.hard_sigmoid(x, alpha, beta), [x]), {"x": SELU_INPUT})


@pytest.mark.parametrize("op", ["selu", "hard_sigmoid"])
@pytest.mark.parametrize("params", [(1.6732632, 1.050701), (0.2, 0.5), (-0.5, 0.25)])
def test_runtime_parameters(tmp_path, op, params):
    """alpha/lambda/beta fed at run time (decomposed). The CPU plugin cannot run these, so numpy is the oracle."""
    shape = [1] if op == "selu" else []
    inputs = [np.array(v, np.float32).reshape(shape) for v in params]
    spec = selu_spec if op == "selu" else hard_sigmoid_spec
    check_spec(tmp_path, getattr(ops, op), SELU_INPUT, *inputs, want=spec(SELU_INPUT, *params))


SOFTMAX_INPUT = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11) * np.float32(0.7)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_softmax_v1(tmp_path, axis):
    run_unary(tmp_path, lambda x: ops1.softmax(x, axis), SOFTMAX_INPUT)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [-3, -1, 0, 2])
def test_softmax(tmp_path, op, axis, dtype):
    rtol = 1e-3 if dtype == np.float16 else 1e-5
    run_unary(tmp_path, lambda x: getattr(ops, op)(x, axis), SOFTMAX_INPUT.astype(dtype), rtol)


def test_softmax_v1_rejects_negative_axis(tmp_path):
    """SoftMax-1's axis is unsigned in OpenVINO; an IR that says -1 is malformed, and the error says where."""
    x = ops.parameter([2, 3], np.float32, name="x")
    xml = single_op(tmp_path, ops1.softmax(x, 1, name="sm"), [x])
    xml.write_text(xml.read_text().replace('<data axis="1" />', '<data axis="-1" />'))
    layer_id = re.search(r'<layer id="(\d+)" name="sm"', xml.read_text()).group(1)
    with pytest.raises(ConversionError) as err:
        ortstate.convert(xml)
    assert str(err.value) == f"{xml}: layer 'sm' (id {layer_id}, SoftMax-1): axis -1 is out of range [0, 1] for rank 2"

"""``convert/ops/activations.py`` (ReLU, Sigmoid, Tanh, HSwish, HSigmoid, Mish, SoftPlus, Elu, PReLU,
Swish, Gelu, Selu, HardSigmoid) against OpenVINO.

Integer inputs are part of OpenVINO's op set for most: the CPU plugin computes them in f32 and rounds.
"""

import numpy as np
import openvino.opset2 as ops2
import openvino.opset13 as ops
import pytest
from oracle import assert_close, check_model, check_spec, open_session, run_unary, single_op, unary_cases, unary_values

# op: (float values, integer values or None where OpenVINO has no integer form worth testing)
ACTIVATIONS = {
    "relu": ([-2.0, -0.5, 0.0, 0.5, 3.0], [-5, -1, 0, 1, 7]),
    "sigmoid": ([-6.0, -1.0, 0.0, 0.5, 3.0], [-5, -1, 1, 2, 7]),
    "tanh": ([-6.0, -1.0, 0.0, 0.5, 3.0], [-5, -1, 0, 1, 7]),
    "hswish": ([-4.0, -3.0, -1.0, 0.0, 0.5, 3.0, 5.0], [-5, -3, -1, 0, 1, 2, 7]),
    "hsigmoid": ([-4.0, -3.0, -1.0, 0.0, 0.5, 3.0, 5.0], [-5, -3, -1, 1, 2, 7]),
    "mish": ([-6.0, -1.0, 0.0, 0.5, 3.0, 30.0], None),
    "softplus": ([-30.0, -6.0, -1.0, 0.0, 0.5, 3.0, 30.0, 100.0], None),
}


@pytest.mark.parametrize(("op", "dtype"), unary_cases(ACTIVATIONS))
def test_unary_activation(tmp_path, op, dtype):
    values = unary_values(ACTIVATIONS, op, dtype)
    run_unary(tmp_path, getattr(ops, op), values, rtol=1e-3 if dtype == np.float16 else 1e-5)


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

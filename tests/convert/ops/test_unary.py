"""``convert/ops/unary.py`` (Abs ... Atanh, SoftSign, Floor, Ceiling, Round, Clamp) against the OpenVINO CPU
plugin.

Integer inputs to float math (Exp, Sin, Sigmoid, ...) are part of OpenVINO's op set: the CPU plugin
computes them in f32 and rounds, which the integer cases pin.
"""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import check_model, check_spec, run_unary, single_op, unary_cases, unary_values

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
}


NO_UNSIGNED = {"negative"}


@pytest.mark.parametrize(("op", "dtype"), unary_cases(UNARY, NO_UNSIGNED))
def test_unary(tmp_path, op, dtype):
    values = unary_values(UNARY, op, dtype)
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

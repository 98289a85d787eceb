"""Reduce* translators against the OpenVINO CPU plugin: constant, negative, scalar, empty and run-time axes."""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import check_model, check_spec, single_op

RNG = np.random.default_rng(7)
REDUCE = ["sum", "mean", "max", "min", "prod", "l1", "l2"]
DTYPES = [np.float32, np.float16, np.int32, np.int64, np.int8, np.uint8]
# Constant axes as OpenVINO models carry them: i64 lists, negative, i32, a scalar, all axes.
AXES = {
    "1": np.array([1], np.int64),
    "-1": np.array([-1], np.int64),
    "0,2": np.array([0, 2], np.int64),
    "-3,1,2": np.array([-3, 1, 2], np.int64),
    "scalar": np.array(1, np.int64),
    "i32": np.array([-2], np.int32),
}


def data(op: str, dtype, shape=(2, 3, 4)) -> np.ndarray:
    """Small values (signed unless unsigned) that cannot overflow ``dtype`` when reduced."""
    if op == "prod":
        values = RNG.choice([-1, 1, 1, 1, 2, -2] if dtype != np.uint8 else [1, 1, 2, 1], size=shape)
        values.reshape(-1)[: values.size // 2] = 1  # keep all-axes products small
    elif op == "l2" and np.dtype(dtype).itemsize == 1:  # OpenVINO sums the squares in 8 bits
        values = RNG.integers(0 if dtype == np.uint8 else -2, 3, size=shape)
    else:
        values = RNG.integers(0 if dtype == np.uint8 else -5, 6, size=shape)
    if np.issubdtype(dtype, np.floating):
        return (values * 0.75).astype(dtype)
    return values.astype(dtype)


def reduce(op: str, x, axes, keep_dims: bool):  # noqa: ANN201
    return getattr(ops, f"reduce_{op}")(x, axes, keep_dims)


def run(tmp_path, op: str, axes: np.ndarray, keep_dims: bool, dtype) -> None:
    x = ops.parameter([2, 3, 4], dtype, name="x")
    xml = single_op(tmp_path, reduce(op, x, ops.constant(axes), keep_dims), [x])
    rtol = 1e-2 if dtype == np.float16 else 1e-5
    check_model(xml, {"x": data(op, dtype)}, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("keep_dims", [False, True])
@pytest.mark.parametrize("axes", list(AXES))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", REDUCE)
def test_reduce(tmp_path, op, dtype, axes, keep_dims):
    run(tmp_path, op, AXES[axes], keep_dims, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("op", REDUCE)
def test_reduce_empty_axes(tmp_path, op, dtype):
    """No axes reduces nothing (ONNX would reduce everything): L1/L2 still take |x|.

    The CPU plugin only compiles this with keep_dims; without it the spec (numpy) is the oracle.
    """
    empty = np.zeros(0, np.int64)
    run(tmp_path, op, empty, True, dtype)
    values = data(op, dtype)
    want = np.abs(values) if op in ("l1", "l2") else values
    check_spec(tmp_path, lambda x: reduce(op, x, ops.constant(empty), False), values, want=want)


NUMPY_REDUCE = {
    "sum": np.sum,
    "mean": np.mean,
    "max": np.max,
    "l2": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
}


@pytest.mark.parametrize("keep_dims", [False, True])
@pytest.mark.parametrize("axes", [np.array([0]), np.array([-1, 0], np.int32), np.array([2, -2])], ids=str)
@pytest.mark.parametrize("op", list(NUMPY_REDUCE))
def test_reduce_runtime_axes(tmp_path, op, axes, keep_dims):
    """Axes computed at run time. The CPU plugin only compiles these when the output rank is clear
    (keep_dims, or one axis), so the other cases are held to numpy."""
    values = data(op, np.float32)
    if keep_dims or len(axes) == 1:
        x = ops.parameter([2, 3, 4], np.float32, name="x")
        axes_in = ops.parameter([len(axes)], axes.dtype, name="axes")
        xml = single_op(tmp_path, reduce(op, x, axes_in, keep_dims), [x, axes_in])
        check_model(xml, {"x": values, "axes": axes})
    else:
        want = NUMPY_REDUCE[op](values, axis=tuple(int(a) for a in axes), keepdims=False).astype(np.float32)
        check_spec(tmp_path, lambda x, a: reduce(op, x, a, keep_dims), values, axes, want=want)


def test_reduce_sum_saturates(tmp_path):
    """8-bit sums run in int32 and saturate when cast back, as on the CPU plugin (100 + 100 + 1 -> 127)."""
    x = ops.parameter([2, 3], np.int8, name="x")
    xml = single_op(tmp_path, reduce("sum", x, ops.constant(np.array([1])), False), [x])
    out = check_model(xml, {"x": np.array([[100, 100, 1], [-100, -100, -1]], np.int8)})
    np.testing.assert_array_equal(out[0], [127, -128])


LOGICAL_AXES = [
    np.array([1], np.int64),
    np.array([-1, 0], np.int64),
    np.array(2, np.int32),
    np.array([0, 1, 2], np.int64),
]


@pytest.mark.parametrize("keep_dims", [False, True])
@pytest.mark.parametrize("axes", LOGICAL_AXES, ids=str)
@pytest.mark.parametrize("op", ["logical_and", "logical_or"])
def test_reduce_logical(tmp_path, op, axes, keep_dims):
    x = ops.parameter([2, 3, 4], bool, name="x")
    xml = single_op(tmp_path, reduce(op, x, ops.constant(axes), keep_dims), [x])
    values = RNG.random((2, 3, 4)) < 0.7
    values[0, 1, :] = True  # an all-true row and an all-false one
    values[1, 2, :] = False
    check_model(xml, {"x": values})


@pytest.mark.parametrize("op", ["logical_and", "logical_or"])
def test_reduce_logical_empty_axes(tmp_path, op):
    x = ops.parameter([2, 3], bool, name="x")
    xml = single_op(tmp_path, reduce(op, x, ops.constant(np.zeros(0, np.int64)), True), [x])
    check_model(xml, {"x": np.array([[True, False, True], [False, False, True]])})

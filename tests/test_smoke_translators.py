"""Translators added with the core: Const, Convert, element-wise binaries, ShapeOf, Broadcast."""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import check_model, single_op

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "maximum", "minimum"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_arithmetic(tmp_path, op, dtype):
    a = ops.parameter([2, 3], dtype, name="a")
    b = ops.parameter([1, 3], dtype, name="b")
    xml = single_op(tmp_path, getattr(ops, op)(a, b), [a, b])
    check_model(xml, {"a": (RNG.random((2, 3)) * 10).astype(dtype), "b": (RNG.random((1, 3)) * 10).astype(dtype)})


@pytest.mark.parametrize("op", ["equal", "less", "less_equal", "greater", "greater_equal"])
def test_comparison(tmp_path, op):
    a = ops.parameter([4], np.int32, name="a")
    b = ops.parameter([4], np.int32, name="b")
    xml = single_op(tmp_path, getattr(ops, op)(a, b), [a, b])
    check_model(xml, {"a": np.array([1, 2, 3, 4], np.int32), "b": np.array([4, 2, 1, 4], np.int32)})


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical(tmp_path, op):
    a = ops.parameter([4], bool, name="a")
    b = ops.parameter([4], bool, name="b")
    xml = single_op(tmp_path, getattr(ops, op)(a, b), [a, b])
    check_model(xml, {"a": np.array([1, 1, 0, 0], bool), "b": np.array([1, 0, 1, 0], bool)})


@pytest.mark.parametrize("compress", [False, True])
def test_const_and_convert(tmp_path, compress):
    a = ops.parameter([2, 3], np.float32, name="a")
    w = ops.constant(RNG.random((2, 3)).astype(np.float32))
    out = ops.convert(ops.multiply(a, w), "i32")
    xml = single_op(tmp_path, [out, ops.add(a, w)], [a], compress=compress)
    check_model(xml, {"a": (RNG.random((2, 3)) * 10).astype(np.float32)}, rtol=1e-3 if compress else 1e-5)


@pytest.mark.parametrize("mode", ["numpy", "bidirectional", "explicit"])
def test_broadcast_shape_of(tmp_path, mode):
    a = ops.parameter([3], np.float32, name="a")
    like = ops.parameter([2, 3], np.float32, name="like")
    if mode == "explicit":
        out = ops.broadcast(
            a, ops.constant(np.array([3, 2], np.int64)), ops.constant(np.array([0], np.int64)), "explicit"
        )
    else:
        out = ops.broadcast(a, ops.shape_of(like), broadcast_spec=mode)
    xml = single_op(tmp_path, out, [a, like])
    check_model(xml, {"a": np.array([1, 2, 3], np.float32), "like": np.zeros((2, 3), np.float32)})

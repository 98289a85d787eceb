"""``convert/ops/logical.py`` (Equal, NotEqual, Less*, Greater*, Logical*, Select) against OpenVINO."""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, binary, check_model, single_op, values


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, bool])
def test_not_equal(tmp_path, dtype):
    x = np.array([[1, 0, -2, 3], [0, 0, 1, 1]]).astype(dtype)
    binary(tmp_path, ops.not_equal, x, np.array([1, -2, 3, 1]).astype(dtype))


@pytest.mark.parametrize("dtype", [bool, np.float32, np.int32])
def test_logical_not(tmp_path, dtype):
    x = np.array([[1, 0, -2], [0, 3, 0]]).astype(dtype)
    a = ops.parameter(x.shape, x.dtype, name="a")
    check_model(single_op(tmp_path, ops.logical_not(a), [a]), {"a": x})


RNG = np.random.default_rng(0)


# -- Select, OneHot ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("cond_shape", "then_shape", "else_shape", "mode"),
    [((2, 3), (2, 3), (2, 3), "none"), ((2, 3), (2, 3), (2, 3), "numpy"), ((3,), (2, 1), (1,), "numpy"),
     ((2, 1, 3), (4, 1), (), "numpy")],
)  # fmt: skip
def test_select(tmp_path, dtype, cond_shape, then_shape, else_shape, mode):
    cond = ops.parameter(list(cond_shape), bool, name="cond")
    then = ops.parameter(list(then_shape), dtype, name="then")
    other = ops.parameter(list(else_shape), dtype, name="else")
    xml = single_op(tmp_path, ops.select(cond, then, other, mode), [cond, then, other])
    assert_layer(xml, "Select", "opset1")
    cond_value = RNG.random(cond_shape) > 0.5
    check_model(
        xml, {"cond": cond_value, "then": values(then_shape, dtype), "else": np.asarray(values(else_shape, dtype))}
    )


@pytest.mark.parametrize("dtype", [bool, np.int16, np.uint16, np.uint64])
def test_where_types_onnxruntime_lacks(tmp_path, dtype):
    """onnxruntime has no Where kernel for these: Select and Gather's range check must still work."""
    cond = ops.parameter([4], bool, name="cond")
    a = ops.parameter([4], dtype, name="a")
    c = ops.parameter([4], dtype, name="c")
    idx = ops.parameter([3], np.int64, name="idx")
    gathered = ops.gather(a, idx, ops.constant(np.int64(0)))
    xml = single_op(tmp_path, [ops.select(cond, a, c), gathered], [cond, a, c, idx])
    check_model(
        xml,
        {
            "cond": np.array([True, False, True, False]),
            "a": np.array([1, 0, 1, 7]).astype(dtype),  # OpenVINO's CPU plugin narrows u64 values
            "c": np.array([0, 1, 1, 0]).astype(dtype),
            "idx": np.array([2, -1, 0], np.int64),
        },
    )


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

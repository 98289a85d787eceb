"""``convert/ops/split.py`` (Split, VariadicSplit) against OpenVINO."""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, check_model, single_op, values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("axis", "parts"), [(0, 2), (1, 3), (-1, 4), (2, 1)])
def test_split(tmp_path, dtype, axis, parts):
    a = ops.parameter([4, 6, 8], dtype, name="a")
    xml = single_op(tmp_path, ops.split(a, ops.constant(np.int64(axis)), parts), [a])
    assert_layer(xml, "Split", "opset1")
    check_model(xml, {"a": values((4, 6, 8), dtype)})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("axis", "lengths"), [(1, [1, 2, 3]), (1, [2, -1, 1]), (-1, [-1, 3]), (0, [4, 0]), (1, [6])])
@pytest.mark.parametrize("dynamic", [False, True])
def test_variadic_split(tmp_path, dtype, axis, lengths, dynamic):
    a = ops.parameter([-1, -1, -1] if dynamic else [4, 6, 8], dtype, name="a")
    xml = single_op(tmp_path, ops.variadic_split(a, np.int64(axis), ops.constant(np.array(lengths, np.int64))), [a])
    assert_layer(xml, "VariadicSplit", "opset1")
    check_model(xml, {"a": values((4, 6, 8), dtype)})


def test_variadic_split_runtime_lengths(tmp_path):
    a = ops.parameter([4, 6], np.float32, name="a")
    lengths = ops.parameter([3], np.int32, name="lengths")
    xml = single_op(tmp_path, ops.variadic_split(a, np.int64(1), lengths), [a, lengths])
    for given in ([1, -1, 2], [3, 3, 0]):
        check_model(xml, {"a": values((4, 6), np.float32), "lengths": np.array(given, np.int32)})

"""``convert/ops/transpose.py`` (Transpose) against OpenVINO."""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, check_model, op_types, single_op, values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", [[0, 2, 1, 3], [3, 2, 1, 0], [1, 0, 3, 2], [], [2, 0, 3, 1]])
def test_transpose_constant(tmp_path, dtype, order):
    a = ops.parameter([2, 3, 4, 5], dtype, name="a")
    xml = single_op(tmp_path, ops.transpose(a, ops.constant(np.array(order, np.int64))), [a])
    assert_layer(xml, "Transpose", "opset1")
    check_model(xml, {"a": values((2, 3, 4, 5), dtype)})


@pytest.mark.parametrize("order", [[0, 2, 1], [2, 0, 1], [1, 2, 0], [2, 1, 0]])
def test_transpose_runtime_order(tmp_path, order):
    a = ops.parameter([2, 3, 4], np.float32, name="a")
    perm = ops.parameter([3], np.int32, name="perm")
    xml = single_op(tmp_path, ops.transpose(a, perm), [a, perm])
    assert "GatherND" in op_types(xml)
    check_model(xml, {"a": values((2, 3, 4), np.float32), "perm": np.array(order, np.int32)})

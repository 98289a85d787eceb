"""``convert/ops/one_hot.py`` (OneHot) against OpenVINO."""

import numpy as np
import openvino.opset8 as ops8
import openvino.opset13 as ops
import pytest
from oracle import assert_layer, check_model, single_op


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize(("dtype", "index_type"), [(np.float32, np.int64), (np.int32, np.int32), (np.int64, np.int32)])
def test_one_hot(tmp_path, axis, dtype, index_type):
    """Indices outside [0, depth), negative ones included, give all-off rows."""
    indices = ops.parameter([2, 4], index_type, name="indices")
    depth = ops.constant(np.array(4, index_type))
    out = ops.one_hot(indices, depth, ops.constant(np.array(5, dtype)), ops.constant(np.array(-2, dtype)), axis)
    xml = single_op(tmp_path, out, [indices])
    assert_layer(xml, "OneHot", "opset1")
    check_model(xml, {"indices": np.array([[0, 3, 1, 4], [-1, 2, -4, 9]], index_type)})


def test_one_hot_runtime_depth(tmp_path):
    indices = ops.parameter([5], np.int64, name="indices")
    like = ops.parameter([-1], np.float32, name="like")
    depth = ops8.gather(ops.shape_of(like), np.int64(0), np.int64(0))
    out = ops.one_hot(indices, depth, np.float32(1), np.float32(0), -1)
    xml = single_op(tmp_path, out, [indices, like])
    check_model(xml, {"indices": np.array([0, 2, 5, 1, -1], np.int64), "like": np.zeros(3, np.float32)})

"""``convert/ops/concat.py`` (Concat) against OpenVINO."""

import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, check_model, single_op, values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_concat(tmp_path, dtype, axis):
    a = ops.parameter([2, 3, 4], dtype, name="a")
    b = ops.parameter([2, 3, 4], dtype, name="b")
    xml = single_op(tmp_path, ops.concat([a, b, a], axis), [a, b])
    assert_layer(xml, "Concat", "opset1")
    check_model(xml, {"a": values((2, 3, 4), dtype), "b": values((2, 3, 4), dtype)})

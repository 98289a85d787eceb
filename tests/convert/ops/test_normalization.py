"""``convert/ops/normalization.py`` (MVN-1, MVN-6) against OpenVINO."""

import numpy as np
import openvino.opset2 as ops2
import openvino.opset13 as ops
import pytest
from oracle import check_model, layer_versions, normal, param, single_op


@pytest.mark.parametrize("eps_mode", ["inside_sqrt", "outside_sqrt"])
@pytest.mark.parametrize("normalize_variance", [True, False])
@pytest.mark.parametrize("axes", [[-1], [1, 2], [0, 2], [2, 1], [0, 1, 2]], ids=str)
def test_mvn6(tmp_path, axes, normalize_variance, eps_mode):
    """A large eps (0.5) so that where it is added shows in the result."""
    x = param("x", (2, 3, 5), dynamic=(0, 1))
    node = ops.mvn(x, ops.constant(np.array(axes, np.int32)), normalize_variance, 0.5, eps_mode)
    xml = single_op(tmp_path, node, [x])
    assert layer_versions(xml, "MVN") == {"opset6"}
    check_model(xml, {"x": normal(2, 3, 5) * 2 + 1}, rtol=1e-5, atol=1e-5)


def test_mvn6_runtime_axes(tmp_path):
    x, axes = param("x", (2, 3, 5)), ops.parameter([1], np.int64, name="axes")
    xml = single_op(tmp_path, ops.mvn(x, axes, True, 1e-5, "inside_sqrt"), [x, axes])
    check_model(xml, {"x": normal(2, 3, 5), "axes": np.array([-2], np.int64)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("across_channels", [True, False])
@pytest.mark.parametrize("normalize_variance", [True, False])
def test_mvn1(tmp_path, across_channels, normalize_variance):
    x = param("x", (2, 3, 4, 5))
    xml = single_op(tmp_path, ops2.mvn(x, across_channels, normalize_variance, 0.5), [x])
    assert layer_versions(xml, "MVN") == {"opset2"}
    check_model(xml, {"x": normal(2, 3, 4, 5) * 2 + 1}, rtol=1e-5, atol=1e-5)

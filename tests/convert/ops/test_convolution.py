"""``convert/ops/convolution.py`` (Convolution, GroupConvolution) against OpenVINO."""

import openvino.opset13 as ops
import pytest
from oracle import check_model, layer_versions, normal, onnx_ops, param, single_op

CONV_CASES = {
    # name: (data shape, kernel, strides, pads_begin, pads_end, dilations, auto_pad)
    "1d": ((2, 3, 11), (3,), [1], [0], [0], [1], "explicit"),
    "1d-whisper": ((1, 4, 12), (3,), [2], [1], [1], [1], "explicit"),
    "1d-dilated": ((1, 3, 13), (3,), [1], [2], [1], [2], "explicit"),
    "2d": ((2, 3, 9, 10), (3, 2), [2, 1], [1, 0], [0, 1], [1, 1], "explicit"),
    "2d-patches": ((1, 3, 16, 16), (8, 8), [8, 8], [0, 0], [0, 0], [1, 1], "explicit"),
    "2d-dilated": ((1, 2, 11, 12), (3, 3), [1, 2], [0, 0], [0, 0], [2, 1], "explicit"),
    "same_upper": ((1, 3, 10, 9), (4, 3), [2, 2], [0, 0], [0, 0], [1, 1], "same_upper"),
    "same_lower": ((1, 3, 10, 9), (4, 3), [2, 2], [0, 0], [0, 0], [1, 1], "same_lower"),
    "same_upper-dilated": ((1, 3, 11), (2,), [3], [0], [0], [2], "same_upper"),  # odd total padding: 1
    "same_lower-dilated": ((1, 3, 11, 10), (2, 3), [3, 1], [0, 0], [0, 0], [2, 2], "same_lower"),
    "valid": ((1, 3, 10, 9), (3, 3), [2, 2], [5, 5], [5, 5], [1, 1], "valid"),
}


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_convolution(tmp_path, case, compress):
    shape, kernel, strides, begin, end, dilations, auto_pad = CONV_CASES[case]
    x = param("x", shape, dynamic=(0, len(shape) - 1))
    w = ops.constant(normal(5, shape[1], *kernel))
    xml = single_op(tmp_path, ops.convolution(x, w, strides, begin, end, dilations, auto_pad), [x], compress=compress)
    assert layer_versions(xml, "Convolution") == {"opset1"}
    check_model(xml, {"x": normal(*shape)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_group_convolution(tmp_path, case):
    """Two groups of 3 input and 2 output channels each."""
    shape, kernel, strides, begin, end, dilations, auto_pad = CONV_CASES[case]
    shape = (shape[0], 6, *shape[2:])
    x = param("x", shape, dynamic=(0,))
    w = ops.constant(normal(2, 2, 3, *kernel))
    node = ops.group_convolution(x, w, strides, begin, end, dilations, auto_pad)
    xml = single_op(tmp_path, node, [x])
    check_model(xml, {"x": normal(*shape)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length", [1, 3, 9])
def test_group_convolution_depthwise_causal(tmp_path, length):
    """Mamba's causal conv1d: depthwise weights [C, 1, 1, k], pads k - 1 both sides, dynamic length."""
    x = param("x", (2, 8, length), dynamic=(0, 2))
    w = ops.constant(normal(8, 1, 1, 4))
    xml = single_op(tmp_path, ops.group_convolution(x, w, [1], [3], [3], [1]), [x])
    assert layer_versions(xml, "GroupConvolution") == {"opset1"}
    check_model(xml, {"x": normal(2, 8, length)})
    assert onnx_ops(xml)["Conv"] == 1

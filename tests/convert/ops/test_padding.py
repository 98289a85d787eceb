"""``convert/ops/padding.py`` (Pad-1, Pad-12) against OpenVINO."""

import numpy as np
import openvino.opset1 as ops1
import openvino.opset13 as ops
import pytest
from oracle import check_model, layer_versions, onnx_ops, param, single_op

RNG = np.random.default_rng(3)


SPEC_DATA = np.arange(1, 13, dtype=np.float32).reshape(3, 4)


PADS = {  # the spec's examples, then a crop of the whole first axis and a 3-D case
    "positive": ([0, 1], [2, 3]),
    "negative": ([-1, -1], [-1, -1]),
    "mixed": ([2, -1], [-1, 3]),
    "crop-both": ([-1, 2], [1, -2]),
    "zero": ([0, 0], [0, 0]),
}


MODES = ["constant", "edge", "reflect", "symmetric"]


@pytest.mark.parametrize("runtime_pads", [False, True])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pads", list(PADS))
def test_pad12(tmp_path, pads, mode, runtime_pads):
    begin, end = (np.array(p, np.int64) for p in PADS[pads])
    x = param("x", (3, 4), dynamic=(0,) if runtime_pads else ())
    params, feeds = [x], {"x": SPEC_DATA}
    if runtime_pads:
        b, e = ops.parameter([2], np.int64, name="b"), ops.parameter([2], np.int64, name="e")
        params += [b, e]
        feeds |= {"b": begin, "e": end}
    else:
        b, e = ops.constant(begin), ops.constant(end)
    value = ops.constant(np.float32(-7)) if mode == "constant" else None
    xml = single_op(tmp_path, ops.pad(x, b, e, mode, value), params)
    assert layer_versions(xml, "Pad") == {"opset12"}
    check_model(xml, feeds)


@pytest.mark.parametrize("mode", MODES)
def test_pad12_3d_i32_pads(tmp_path, mode):
    x = param("x", (2, 3, 4), np.int32, dynamic=(2,))
    begin, end = ops.constant(np.array([1, 0, 3], np.int32)), ops.constant(np.array([0, 2, -1], np.int32))
    xml = single_op(tmp_path, ops.pad(x, begin, end, mode), [x])
    check_model(xml, {"x": RNG.integers(-9, 9, (2, 3, 4)).astype(np.int32)})


def test_pad12_bool_runtime(tmp_path):
    """As lfm2's mask padding: bool data, pads from run-time values, a False pad value."""
    x = param("x", (2, 3), bool, dynamic=(0, 1))
    b, e = ops.parameter([2], np.int64, name="b"), ops.parameter([2], np.int64, name="e")
    xml = single_op(tmp_path, ops.pad(x, b, e, "constant", ops.constant(np.bool_(False))), [x, b, e])
    feeds = {"x": np.array([[1, 0, 1], [0, 1, 1]], bool)}
    feeds |= {"b": np.array([0, 2], np.int64), "e": np.array([1, -1], np.int64)}
    check_model(xml, feeds)


@pytest.mark.parametrize("mode", MODES)
def test_pad1(tmp_path, mode):
    x = param("x", (3, 4))
    xml = single_op(tmp_path, ops1.pad(x, [2, 1], [1, 3], mode), [x])
    assert layer_versions(xml, "Pad") == {"opset1"}
    check_model(xml, {"x": SPEC_DATA})


def test_pad_structure(tmp_path):
    """Constant pads become one ONNX Pad; symmetric pads only the padded axes, with one Gather each."""
    x = param("x", (3, 4))
    xml = single_op(tmp_path, ops.pad(x, [0, 1], [2, 3], "constant"), [x], "constant")
    assert onnx_ops(xml)["Pad"] == 1
    xml = single_op(tmp_path, ops.pad(x, [0, 1], [0, 3], "symmetric"), [x], "symmetric")
    assert onnx_ops(xml)["Gather"] == 1 and onnx_ops(xml)["Pad"] == 0

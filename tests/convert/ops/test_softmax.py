"""``convert/ops/softmax.py`` (SoftMax-1, SoftMax-8, LogSoftmax) against OpenVINO."""

import re

import numpy as np
import openvino.opset1 as ops1
import openvino.opset13 as ops
import pytest
from oracle import run_unary, single_op

import ortstate
from ortstate.errors import ConversionError

SOFTMAX_INPUT = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11) * np.float32(0.7)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_softmax_v1(tmp_path, axis):
    run_unary(tmp_path, lambda x: ops1.softmax(x, axis), SOFTMAX_INPUT)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [-3, -1, 0, 2])
def test_softmax(tmp_path, op, axis, dtype):
    rtol = 1e-3 if dtype == np.float16 else 1e-5
    run_unary(tmp_path, lambda x: getattr(ops, op)(x, axis), SOFTMAX_INPUT.astype(dtype), rtol)


def test_softmax_v1_rejects_negative_axis(tmp_path):
    """SoftMax-1's axis is unsigned in OpenVINO; an IR that says -1 is malformed, and the error says where."""
    x = ops.parameter([2, 3], np.float32, name="x")
    xml = single_op(tmp_path, ops1.softmax(x, 1, name="sm"), [x])
    xml.write_text(xml.read_text().replace('<data axis="1" />', '<data axis="-1" />'))
    layer_id = re.search(r'<layer id="(\d+)" name="sm"', xml.read_text()).group(1)
    with pytest.raises(ConversionError) as err:
        ortstate.convert(xml)
    assert str(err.value) == f"{xml}: layer 'sm' (id {layer_id}, SoftMax-1): axis -1 is out of range [0, 1] for rank 2"

"""``convert/ops/constants.py`` (Const) against OpenVINO: a constant of each element type becomes an
initializer holding the same values."""

import numpy as np
import openvino.opset13 as ops
import pytest
from onnx import numpy_helper
from oracle import check_model, single_op

import ortstate

RNG = np.random.default_rng(17)
TYPES = [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64]
TYPES += [np.uint64, bool]


@pytest.mark.parametrize("shape", [(2, 3), (5,)])
@pytest.mark.parametrize("dtype", TYPES)
def test_const(tmp_path, dtype, shape):
    """Concatenated with a Parameter, so the Const is neither folded nor read as a weight."""
    value = (RNG.random(shape) * 100).astype(dtype)  # small: the CPU plugin narrows 64-bit integers
    x = ops.parameter(list(shape), dtype, name="x")
    xml = single_op(tmp_path, ops.concat([x, ops.constant(value)], 0), [x])
    inits = [numpy_helper.to_array(i) for i in ortstate.convert(xml).graph.initializer]
    assert any(i.dtype == value.dtype and i.tolist() == value.tolist() for i in inits), inits
    check_model(xml, {"x": (RNG.random(shape) * 100).astype(dtype)})

"""``convert/ops/constants.py`` and ``convert/ops/conversion.py`` (Const, Convert) against OpenVINO."""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import check_model, single_op

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("compress", [False, True])
def test_const_and_convert(tmp_path, compress):
    a = ops.parameter([2, 3], np.float32, name="a")
    w = ops.constant(RNG.random((2, 3)).astype(np.float32))
    out = ops.convert(ops.multiply(a, w), "i32")
    xml = single_op(tmp_path, [out, ops.add(a, w)], [a], compress=compress)
    check_model(xml, {"a": (RNG.random((2, 3)) * 10).astype(np.float32)}, rtol=1e-3 if compress else 1e-5)

"""``convert/ops/cum_sum.py`` (CumSum) against OpenVINO."""

import numpy as np
import openvino.opset3 as ops3
import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, check_model, drop_input, open_session, single_op, values


@pytest.mark.parametrize("axis", [0, 1, -1, None])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cum_sum(tmp_path, axis, exclusive, reverse, dtype):
    """axis None: the optional axis input is left out (the sum runs along axis 0)."""
    data = ops.parameter([3, 4], dtype, name="data")
    out = ops3.cumsum(data, ops.constant(np.int32(0 if axis is None else axis)), exclusive, reverse)
    xml = single_op(tmp_path, out, [data])
    assert_layer(xml, "CumSum", "opset3")
    x = values((3, 4), dtype)
    if axis is not None:
        check_model(xml, {"data": x})
        return
    # OpenVINO 2026.4 cannot read a CumSum without its axis input, so numpy checks the default axis 0.
    drop_input(xml, "CumSum", 1)
    got = open_session(xml).run(None, {"data": x})[0]
    want = np.cumsum(x[::-1] if reverse else x, axis=0, dtype=dtype)
    want = (want - (x[::-1] if reverse else x)) if exclusive else want
    np.testing.assert_allclose(got, want[::-1] if reverse else want, rtol=1e-5, atol=1e-4)

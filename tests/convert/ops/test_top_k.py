"""``convert/ops/top_k.py`` (TopK) against OpenVINO."""

import numpy as np
import openvino.opset1 as ops1
import openvino.opset3 as ops3
import openvino.opset11 as ops11
import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, check_model, open_session, ov_request, ov_run, single_op, values

# -- TopK, CumSum ------------------------------------------------------------------------------
TOPK_DATA = np.array([[3, 1, 4, 0, 5, 9, 2, 6], [15, 12, 8, 10, 7, 11, 13, 14], [-1, -2, -3, -4, -5, -6, -7, -8]])


TOPK_TIES = np.array([[3, 1, 4, 1, 5, 9, 2, 6], [5, 5, 2, 5, 0, 2, 2, 7], [1, 1, 1, 1, 1, 1, 1, 1]])


@pytest.mark.parametrize("version", [1, 3, 11])
@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("sort", ["value", "index", "none"])
@pytest.mark.parametrize(("axis", "k"), [(1, 3), (-1, 8), (0, 2), (1, 1)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_top_k(tmp_path, version, mode, sort, axis, k, dtype):
    data = ops.parameter(list(TOPK_DATA.shape), dtype, name="data")
    count = ops.constant(np.array(k, np.int32))
    if version == 1:
        out = ops1.topk(data, count, axis, mode, sort)
    elif version == 3:
        out = ops3.topk(data, count, axis, mode, sort, "i64")
    else:
        out = ops11.topk(data, count, axis, mode, sort, "i32", stable=sort != "none")
    xml = single_op(tmp_path, out, [data])
    assert_layer(xml, "TopK", f"opset{version}")
    check_model(xml, {"data": TOPK_DATA.astype(dtype)})


@pytest.mark.parametrize("version", [1, 3, 11])
@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("sort", ["value", "index", "none"])
@pytest.mark.parametrize("k", [3, 8])
def test_top_k_ties(tmp_path, version, mode, sort, k):
    """Equal values: ortstate always returns them lowest index first, which TopK-11's ``stable`` asks for and
    the other forms allow (OpenVINO's CPU plugin then orders them otherwise). Values always match OpenVINO."""
    data = ops.parameter(list(TOPK_TIES.shape), np.float32, name="data")
    count = ops.constant(np.array(k, np.int64))
    stable = version == 11 and sort != "none"
    if version == 11:
        out = ops11.topk(data, count, -1, mode, sort, "i64", stable=stable)
    else:
        out = {1: ops1, 3: ops3}[version].topk(data, count, -1, mode, sort)
    xml = single_op(tmp_path, out, [data])
    feeds = {"data": TOPK_TIES.astype(np.float32)}
    if stable:
        check_model(xml, feeds)
        return
    want_values, _ = ov_run(ov_request(xml), feeds)
    got_values, got_indices = open_session(xml).run(None, feeds)
    np.testing.assert_array_equal(got_values, want_values)
    np.testing.assert_array_equal(np.take_along_axis(TOPK_TIES, got_indices, -1), got_values)
    key = got_indices if sort == "index" else np.where(mode == "max", -got_values, got_values) * 100 + got_indices
    assert (np.diff(key, axis=-1) > 0).all(), "ties not lowest index first"


def test_top_k_runtime_k(tmp_path):
    """k computed at run time from a shape."""
    data = ops.parameter([2, -1], np.float32, name="data")
    like = ops.parameter([-1], np.float32, name="like")
    k = ops.squeeze(ops.shape_of(like), ops.constant(np.array([0], np.int64)))
    xml = single_op(tmp_path, ops11.topk(data, k, -1, "max", "value", "i64", stable=True), [data, like])
    check_model(xml, {"data": values((2, 6), np.float32), "like": np.zeros(4, np.float32)})

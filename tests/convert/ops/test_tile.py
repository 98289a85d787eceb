"""``convert/ops/tile.py`` (Tile) against OpenVINO."""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, check_model, single_op, values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("repeats", [[2, 1, 3], [2], [1, 2], [2, 1, 1, 3], [1]])
@pytest.mark.parametrize("runtime", [False, True])
def test_tile(tmp_path, dtype, repeats, runtime):
    """Repeats shorter than the rank apply to the trailing dims; longer ones add leading dims."""
    a = ops.parameter([2, 3, 4], dtype, name="a")
    rep = ops.parameter([len(repeats)], np.int64, name="rep") if runtime else ops.constant(np.array(repeats, np.int64))
    params = [a, rep] if runtime else [a]
    xml = single_op(tmp_path, ops.tile(a, rep), params)
    assert_layer(xml, "Tile", "opset1")
    feeds = {"a": values((2, 3, 4), dtype)}
    if runtime:
        feeds["rep"] = np.array(repeats, np.int64)
    check_model(xml, feeds)

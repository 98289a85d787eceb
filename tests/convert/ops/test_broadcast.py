"""``convert/ops/broadcast.py`` (Broadcast-1, Broadcast-3) against OpenVINO."""

import numpy as np
import openvino.opset1 as ops1
import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, check_model, single_op, values


@pytest.mark.parametrize(
    ("version", "mode"), [(1, "numpy"), (1, "explicit"), (3, "numpy"), (3, "bidirectional"), (3, "explicit")]
)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("runtime", [False, True])
def test_broadcast(tmp_path, version, mode, dtype, runtime):
    """numpy: [3, 1] -> [2, 3, 4]; bidirectional: [3, 1] with [1, 4] -> [3, 4]; explicit: [3, 4] on axes
    1, 2 of [2, 3, 4]. The target shape is a constant or computed at run time (i32) from ShapeOf."""
    shape = {"numpy": (3, 1), "bidirectional": (3, 1), "explicit": (3, 4)}[mode]
    target_value = {"numpy": [2, 3, 4], "bidirectional": [1, 4], "explicit": [2, 3, 4]}[mode]
    a = ops.parameter(list(shape), dtype, name="a")
    params = [a]
    if runtime:
        like = ops.parameter([-1] * len(target_value), np.float32, name="like")
        params.append(like)
        target = ops.shape_of(like, "i32")
    else:
        target = ops.constant(np.array(target_value, np.int64))
    axes = ops.constant(np.array([1, 2], np.int64)) if mode == "explicit" else None
    out = ops1.broadcast(a, target, axes, mode) if version == 1 else ops.broadcast(a, target, axes, mode)
    xml = single_op(tmp_path, out, params)
    assert_layer(xml, "Broadcast", f"opset{version}")
    feeds = {"a": values(shape, dtype)}
    if runtime:
        feeds["like"] = np.zeros(target_value, np.float32)
    check_model(xml, feeds)


@pytest.mark.parametrize("mode", ["numpy", "bidirectional", "explicit"])
def test_broadcast_shape_of(tmp_path, mode):
    a = ops.parameter([3], np.float32, name="a")
    like = ops.parameter([2, 3], np.float32, name="like")
    if mode == "explicit":
        out = ops.broadcast(
            a, ops.constant(np.array([3, 2], np.int64)), ops.constant(np.array([0], np.int64)), "explicit"
        )
    else:
        out = ops.broadcast(a, ops.shape_of(like), broadcast_spec=mode)
    xml = single_op(tmp_path, out, [a, like])
    check_model(xml, {"a": np.array([1, 2, 3], np.float32), "like": np.zeros((2, 3), np.float32)})

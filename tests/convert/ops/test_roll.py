"""``convert/ops/roll.py`` (Roll) against OpenVINO."""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import check_model, check_spec, layer_versions, normal, onnx_ops, ov_request, ov_run, param, single_op

ROLLS = {  # the spec's examples, then negative, oversized and scalar shifts and negative axes
    "one-axis": (1, [0]),
    "two-axes": ([-1, 2], [0, 1]),
    "repeated-axis": ([1, 2, 1], [0, 1, 0]),
    "negative": ([-5], [1]),
    "oversized": ([11, -9], [0, 2]),
    "negative-axes": ([1, -3], [-1, -2]),
    "full-turn": ([4], [0]),
}


@pytest.mark.parametrize("runtime_shift", [False, True])
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("roll", list(ROLLS))
def test_roll(tmp_path, roll, dynamic, runtime_shift):
    shift, axes = (np.array(v, np.int64) for v in ROLLS[roll])
    x = param("x", (4, 3, 5), dynamic=(0, 1, 2) if dynamic else ())
    params, feeds = [x], {"x": normal(4, 3, 5)}
    if runtime_shift:
        s = ops.parameter(list(shift.shape), np.int64, name="s")
        params.append(s)
        feeds["s"] = shift
    else:
        s = ops.constant(shift)
    xml = single_op(tmp_path, ops.roll(x, s, ops.constant(axes.astype(np.int32))), params)
    assert layer_versions(xml, "Roll") == {"opset7"}
    check_model(xml, feeds)


@pytest.mark.parametrize("runtime_shift", [False, True])
def test_roll_scalar_shift(tmp_path, runtime_shift):
    """A scalar shift rolls every listed axis (the spec; the CPU plugin fails on it, see below)."""
    x = normal(4, 3, 5)
    axes = ops.constant(np.array([0, -1], np.int64))
    if runtime_shift:
        check_spec(tmp_path, lambda d, s: ops.roll(d, s, axes), x, np.array(-2, np.int64), want=np.roll(x, -2, (0, 2)))
    else:
        shift = ops.constant(np.array(-2, np.int64))
        check_spec(tmp_path, lambda d: ops.roll(d, shift, axes), x, want=np.roll(x, -2, (0, 2)))


@pytest.mark.xfail(strict=True, reason="the CPU plugin wants as many shifts as axes, even for a scalar shift")
def test_roll_scalar_shift_cpu_plugin(tmp_path):
    """Why test_roll_scalar_shift holds Roll to the spec; XPASSes (fails) once the CPU plugin follows it.

    The same on every CPU: the plugin refuses the model when it builds its Roll node (a shape check
    in ``roll.cpp``), before any kernel is chosen."""
    x = param("x", (4, 3, 5))
    node = ops.roll(x, ops.constant(np.array(2, np.int64)), ops.constant(np.array([0, 2], np.int64)))
    xml = single_op(tmp_path, node, [x])
    got = ov_run(ov_request(xml), {"x": np.arange(60, dtype=np.float32).reshape(4, 3, 5)})[0]
    np.testing.assert_array_equal(got, np.roll(np.arange(60, dtype=np.float32).reshape(4, 3, 5), 2, (0, 2)))


def test_roll_like_mamba(tmp_path):
    """Mamba's conv-state update: roll the last axis by -1 on [batch, channels, kernel]."""
    x = param("x", (2, 8, 4), dynamic=(0,))
    xml = single_op(tmp_path, ops.roll(x, ops.constant(np.array([-1])), ops.constant(np.array([-1]))), [x])
    check_model(xml, {"x": normal(2, 8, 4)})
    assert onnx_ops(xml)["Concat"] == 1

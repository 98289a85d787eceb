"""``convert/ops/ranges.py`` (Range-1, Range-4) against OpenVINO."""

import numpy as np
import openvino.opset1 as ops1
import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, check_model, single_op

# -- Range -------------------------------------------------------------------------------------
# OpenVINO 2026.4's CPU plugin disagrees with the Range spec and its own constant folding when the inputs
# are run-time values: start > stop with a positive step gives |stop - start| / step elements instead of
# none, and an integer output_type does not truncate fractional inputs first. Those cases are checked with
# constant inputs, which OpenVINO folds with its reference implementation (ortstate still emits Range).
RANGE_CASES = [(0, 10, 3), (10, 0, -3), (-2, 7, 2), (5, 5, 1), (-3, -9, -2)]


RANGE_FOLDED_CASES = [(3, 0, 1), (2, 8, -1)]


@pytest.mark.parametrize(
    ("dtype", "start", "stop", "step"),
    [(t, *case) for t in DTYPES for case in RANGE_CASES + RANGE_FOLDED_CASES] + [(np.float32, 0.5, 3.2, 0.5)],
)
def test_range_v1(tmp_path, dtype, start, stop, step):
    """Range-1: inputs and output share one type; start and step fed at run time."""
    runtime = (start, stop, step) not in RANGE_FOLDED_CASES
    first = ops.parameter([], dtype, name="start") if runtime else ops.constant(np.array(start, dtype))
    delta = ops.parameter([], dtype, name="step") if runtime else ops.constant(np.array(step, dtype))
    like = ops.parameter([1], np.float32, name="like")  # a model needs a Parameter
    out = ops1.range(first, ops.constant(np.array(stop, dtype)), delta)
    xml = single_op(tmp_path, [out, like], [first, delta, like] if runtime else [like])
    assert_layer(xml, "Range", "opset1")
    feeds = {"start": np.array(start, dtype), "step": np.array(step, dtype)} if runtime else {}
    check_model(xml, {**feeds, "like": np.zeros(1, np.float32)})


@pytest.mark.parametrize(
    ("output_type", "start", "stop", "step"),
    [(t, *case) for t in ("f32", "i32", "i64") for case in RANGE_CASES]
    + [("f32", 0.5, 7, 2.5), ("f32", -1.5, 4, 1.5)],  # integer outputs of fractions: test_range_v4_truncates
)
def test_range_v4_mixed_types(tmp_path, output_type, start, stop, step):
    """Range-4: f32 start, i32 (or f32) step, i64 stop computed as ShapeOf(like)[0] + stop."""
    first = ops.parameter([], np.float32, name="start")
    step_type = np.int32 if float(step).is_integer() else np.float32
    delta = ops.parameter([], step_type, name="step")
    like = ops.parameter([-1], np.float32, name="like")
    length = ops.squeeze(ops.shape_of(like), ops.constant(np.array([0], np.int64)))
    end = ops.add(length, ops.constant(np.array(stop, np.int64)))
    xml = single_op(tmp_path, ops.range(first, end, delta, output_type), [first, delta, like])
    assert_layer(xml, "Range", "opset4")
    feeds = {"start": np.array(start, np.float32), "step": np.array(step, step_type)}
    check_model(xml, {**feeds, "like": np.zeros(0, np.float32)})
    check_model(xml, {**feeds, "like": np.zeros(2, np.float32)})


@pytest.mark.parametrize("output_type", ["f32", "i32", "i64"])
@pytest.mark.parametrize(("start", "stop", "step"), [(0.5, 7.9, 2.5), (-1.5, 4.0, 1.5), (3.7, -2.2, -1.3), (2, 0, 1)])
def test_range_v4_truncates(tmp_path, output_type, start, stop, step):
    """An integer output_type truncates f32 inputs toward zero before counting (0.5..7.9 step 2.5 -> 0, 2, 4, 6)."""
    bounds = [ops.constant(np.array(v, np.float32)) for v in (start, stop, step)]
    like = ops.parameter([1], np.float32, name="like")
    xml = single_op(tmp_path, [ops.range(*bounds, output_type), like], [like])
    assert_layer(xml, "Range", "opset4")
    check_model(xml, {"like": np.zeros(1, np.float32)})

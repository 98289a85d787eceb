"""``convert/ops/slicing.py`` (Slice, StridedSlice) against OpenVINO."""

import numpy as np
import openvino.opset1 as ops1
import openvino.opset8 as ops8
import openvino.opset13 as ops
import pytest
from oracle import DTYPES, assert_layer, check_model, open_session, single_op, values


# -- Slice, StridedSlice -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("start", "stop", "step", "axes"),
    [([1], [3], [1], None), ([0, 1], [4, -1], [2, 1], [0, 2]), ([-1], [-100], [-1], [1]),
     ([3, 10], [0, 1], [-2, -3], [2, 0]), ([1, 0], [2, 100], [1, 1], None), ([0], [0], [1], [-1])],
)  # fmt: skip
def test_slice(tmp_path, dtype, start, stop, step, axes):
    data = ops.parameter([4, 5, 6], dtype, name="data")
    consts = [ops.constant(np.array(v, np.int64)) for v in (start, stop, step)]
    axes_node = None if axes is None else ops.constant(np.array(axes, np.int32))
    xml = single_op(tmp_path, ops8.slice(data, *consts, axes_node), [data])
    assert_layer(xml, "Slice", "opset8")
    check_model(xml, {"data": values((4, 5, 6), dtype)})


def test_slice_runtime(tmp_path):
    """Stop computed from ShapeOf, start and step fed at run time, i32 indices."""
    data = ops.parameter([-1, -1], np.float32, name="data")
    start = ops.parameter([2], np.int32, name="start")
    step = ops.parameter([2], np.int32, name="step")
    stop = ops.subtract(ops.shape_of(data, "i32"), ops.constant(np.array([1, 0], np.int32)))
    xml = single_op(tmp_path, ops8.slice(data, start, stop, step), [data, start, step])
    x = values((6, 7), np.float32)
    check_model(xml, {"data": x, "start": np.array([1, 0], np.int32), "step": np.array([2, 3], np.int32)})
    check_model(xml, {"data": x, "start": np.array([-1, 6], np.int32), "step": np.array([1, -2], np.int32)})


# (begin, end, stride, begin_mask, end_mask, new_axis_mask, shrink_axis_mask, ellipsis_mask) on a [4, 5, 6] input
STRIDED_CASES = {
    "plain": ([1, 0, 2], [3, 4, 5], [1, 2, 1], [0, 0, 0], [0, 0, 0], [], [], []),
    "begin_mask": ([3, 3, 3], [4, 4, 4], [1, 1, 1], [1, 0, 1], [0, 0, 0], [], [], []),
    "end_mask": ([1, 1, 1], [2, 2, 2], [1, 1, 1], [0, 0, 0], [0, 1, 1], [], [], []),
    "reverse_masks": ([0, 0, 0], [0, 0, 0], [-1, -2, -3], [1, 1, 1], [1, 1, 1], [], [], []),
    "reverse_ranges": ([3, -1, 100], [0, -100, 1], [-1, -2, -3], [0, 0, 0], [0, 0, 0], [], [], []),
    "reverse_begin_mask_only": ([0, 2, 0], [1, 0, 2], [-1, -1, -2], [1, 0, 1], [0, 0, 0], [], [], []),
    "negative_clamped": ([-2, -100, 1], [100, -1, -1], [1, 1, 2], [0, 0, 0], [0, 0, 0], [], [], []),
    "short_spec": ([1], [3], [1], [0], [0], [], [], []),
    "long_masks": ([1, 2], [3, 4], [1, 1], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]),
    "shrink": ([1, 0, -1], [2, 0, 0], [1, 1, 1], [0, 1, 0], [0, 1, 0], [], [1, 0, 1], []),
    "shrink_masked_begin": ([2, 0], [0, 0], [1, 1], [1, 0], [1, 0], [], [1, 0], []),
    "new_axis": ([0, 1, 0, 0], [0, 3, 0, 5], [1, 1, 1, 2], [0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0], [], []),
    "new_axis_last": ([0, 0, 0, 0], [4, 5, 6, 0], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1], [], []),
    "ellipsis_first": ([0, 1], [0, 4], [1, 2], [0, 0], [0, 0], [], [], [1, 0]),
    "ellipsis_middle": ([1, 0, -1], [3, 0, 0], [1, 1, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0]),
    "ellipsis_new_axes": ([0, 0, 0, 2], [0, 0, 0, 5], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0], [],
                          [0, 1, 0, 0]),
    "ellipsis_all": ([0], [0], [1], [0], [0], [], [], [1]),
    "everything": ([0, 1, 0, -1, 0], [0, 3, 0, 0, 0], [1, 1, 1, 1, -1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 1],
                   [1, 0, 0, 0, 0], [0, 0, 0, 1, 0], [0, 0, 1, 0, 0]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(STRIDED_CASES))
@pytest.mark.parametrize("runtime", [False, True])
def test_strided_slice(tmp_path, case, runtime):
    """Every mask, negative strides and clamping, with begin/end/stride constant or fed at run time."""
    if runtime and case == "ellipsis_all":
        pytest.skip("OpenVINO's CPU plugin has no executor for a lone ellipsis with run-time bounds")
    if (
        runtime and case == "ellipsis_new_axes"
    ):  # its compile-time shape [1,4,1,?,6] contradicts its run-time [1,4,5,1,3]
        pytest.skip("OpenVINO's CPU plugin fails on new axes around an ellipsis with run-time bounds")
    begin, end, stride, begin_mask, end_mask, new_axis, shrink, ellipsis = STRIDED_CASES[case]
    data = ops.parameter([4, 5, 6], np.float32, name="data")
    params, feeds = [data], {"data": values((4, 5, 6), np.float32)}
    inputs = []
    for name, v in (("begin", begin), ("end", end), ("stride", stride)):
        if runtime:
            inputs.append(ops.parameter([len(v)], np.int64, name=name))
            params.append(inputs[-1])
            feeds[name] = np.array(v, np.int64)
        else:
            inputs.append(ops.constant(np.array(v, np.int64)))
    out = ops1.strided_slice(data, *inputs, begin_mask, end_mask, new_axis, shrink, ellipsis)
    xml = single_op(tmp_path, out, params)
    assert_layer(xml, "StridedSlice", "opset1")
    check_model(xml, feeds)


@pytest.mark.parametrize("runtime", [False, True])
def test_strided_slice_ignores_mask_bits_past_spec(tmp_path, runtime):
    """Mask bits past len(begin) are ignored (the spec, and OpenVINO's shape inference: [3, 4, 6] here).

    OpenVINO 2026.4's CPU plugin computes other values for this layer, so numpy is the oracle.
    """
    data = ops.parameter([4, 5, 6], np.float32, name="data")
    begin = ops.parameter([2], np.int64, name="begin") if runtime else ops.constant(np.array([1, 2], np.int64))
    out = ops1.strided_slice(
        data,
        begin,
        np.array([3, 4]),
        np.array([1, 1]),
        [0, 1, 1, 1],
        [1, 0, 1, 1],
        [0, 0, 1, 1],
        [0, 0, 1, 0],
        [0, 0, 0, 1],
    )
    if not runtime:
        assert list(out.get_output_partial_shape(0).to_shape()) == [3, 4, 6]
    xml = single_op(tmp_path, out, [data, begin] if runtime else [data])
    x = values((4, 5, 6), np.float32)
    feeds = {"data": x, "begin": np.array([1, 2], np.int64)} if runtime else {"data": x}
    got = open_session(xml).run(None, feeds)[0]
    np.testing.assert_array_equal(got, x[1:, :4])


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_slice_computed_bounds(tmp_path, dtype):
    """begin/end from ShapeOf arithmetic (i32), no stride input: x[:, 1 : dim - 1]."""
    data = ops.parameter([-1, -1], dtype, name="data")
    dims = ops.shape_of(data, "i32")
    end = ops.subtract(dims, ops.constant(np.array([0, 1], np.int32)))
    begin = ops.constant(np.array([0, 1], np.int32))
    out = ops1.strided_slice(data, begin, end, ops.constant(np.array([1, 1], np.int32)), [1, 0], [1, 0])
    xml = single_op(tmp_path, out, [data])
    check_model(xml, {"data": values((3, 6), dtype)})

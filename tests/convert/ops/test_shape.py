"""``convert/ops/shape.py`` (ShapeOf, Reshape, Squeeze, Unsqueeze) against OpenVINO."""

import numpy as np
import openvino.opset1 as ops1
import openvino.opset13 as ops
import openvino.opset15 as ops15
import pytest
from oracle import DTYPES, assert_layer, check_model, drop_input, open_session, single_op, values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("shape", "target", "special_zero"),
    [
        ((2, 3, 4), [4, -1], False),
        ((2, 3, 4), [0, -1], True),
        ((2, 3, 4), [0, 3, 4], True),
        ((2, 0, 5), [2, 0, 5], False),
        ((2, 3, 4), [-1], True),
        ((3, 2, 5, 2), [3, 2, 0, 2], True),
    ],
)
def test_reshape_constant(tmp_path, dtype, shape, target, special_zero):
    """A 0 in the target copies the input dim with special_zero, else it is a zero-sized dim."""
    a = ops.parameter(list(shape), dtype, name="a")
    xml = single_op(tmp_path, ops.reshape(a, ops.constant(np.array(target, np.int64)), special_zero), [a])
    assert_layer(xml, "Reshape", "opset1")
    check_model(xml, {"a": values(shape, dtype)})


@pytest.mark.parametrize("index_type", ["i32", "i64"])
@pytest.mark.parametrize("special_zero", [True, False])
def test_reshape_runtime_shape(tmp_path, index_type, special_zero):
    """Target shape computed at run time from ShapeOf, with a 0 that copies (or is) a dim."""
    a = ops.parameter([-1, -1, 4], np.float32, name="a")
    like = ops.parameter([-1], np.float32, name="like")
    tail = [-1, 0] if special_zero else [0]
    target = ops.concat(
        [ops.shape_of(like, index_type), ops.constant(np.array(tail, {"i32": np.int32, "i64": np.int64}[index_type]))],
        0,
    )
    xml = single_op(tmp_path, ops.reshape(a, target, special_zero), [a, like])
    assert_layer(xml, "Reshape", "opset1")
    if special_zero:  # [3, -1, 0] -> [3, 2, 4]
        check_model(xml, {"a": values((2, 3, 4), np.float32), "like": np.zeros(3, np.float32)})
    else:  # [5, 0] -> [5, 0]
        check_model(xml, {"a": values((2, 0, 4), np.float32), "like": np.zeros(5, np.float32)})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("version", [1, 15])
@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ([1, 3, 1, 2], [0, 2]),
        ([1, 3, 1, 2], [-2]),
        ([1, 3, 1, 2], None),
        ([1, 3, 1, 2], []),
        ([1], 0),
        ([2, 1, 3], [0, 1]),
    ],
)
def test_squeeze(tmp_path, dtype, version, shape, axes):
    """No or empty axes squeeze every 1-dim; listed dims that are not 1 stay ([2, 1, 3] axes [0, 1] -> [2, 3])."""
    a = ops.parameter(shape, dtype, name="a")
    axes_input = ops.constant(np.array([] if axes is None else axes, np.int64))
    out = ops1.squeeze(a, axes_input) if version == 1 else ops15.squeeze(a, axes_input)
    xml = single_op(tmp_path, out, [a])
    if axes is None:  # the Python builders always add the optional axes input
        drop_input(xml, "Squeeze", 1)
    assert_layer(xml, "Squeeze", f"opset{version}")
    check_model(xml, {"a": values(shape, dtype)})


@pytest.mark.parametrize("allow_axis_skip", [False, True])
def test_squeeze_v15_dynamic(tmp_path, allow_axis_skip):
    a = ops.parameter([-1, 3, -1], np.float32, name="a")
    xml = single_op(tmp_path, ops15.squeeze(a, ops.constant(np.array([0, -1], np.int32)), allow_axis_skip), [a])
    assert_layer(xml, "Squeeze", "opset15")
    if not allow_axis_skip:
        check_model(xml, {"a": values((1, 3, 1), np.float32)})
        return
    # OpenVINO's CPU plugin refuses the dynamic output rank this makes, so numpy is the oracle here.
    session = open_session(xml)
    for shape, want in [((1, 3, 1), (3,)), ((2, 3, 1), (2, 3)), ((1, 3, 5), (3, 5)), ((2, 3, 5), (2, 3, 5))]:
        x = values(shape, np.float32)
        got = session.run(None, {"a": x})[0]
        np.testing.assert_array_equal(got, x.reshape(want))


def test_squeeze_runtime_axes(tmp_path):
    """Axes computed at run time (a listed dim that is not 1 is kept)."""
    a = ops.parameter([1, 3, 1, 2], np.float32, name="a")
    axes = ops.parameter([2], np.int64, name="axes")
    xml = single_op(tmp_path, ops1.squeeze(a, axes), [a, axes])
    session = open_session(xml)
    x = values((1, 3, 1, 2), np.float32)
    for axes_value, want in [([0, 2], (3, 2)), ([-2, 0], (3, 2)), ([1, 2], (1, 3, 2))]:
        got = session.run(None, {"a": x, "axes": np.array(axes_value, np.int64)})[0]
        np.testing.assert_array_equal(got, x.reshape(want))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("axes", "index_type"), [([0], np.int64), ([1, -1], np.int32), (0, np.int64), ([0, 3], np.int64)]
)
def test_unsqueeze(tmp_path, dtype, axes, index_type):
    a = ops.parameter([2, 3], dtype, name="a")
    xml = single_op(tmp_path, ops.unsqueeze(a, ops.constant(np.array(axes, index_type))), [a])
    assert_layer(xml, "Unsqueeze", "opset1")
    check_model(xml, {"a": values((2, 3), dtype)})


# -- ShapeOf, Broadcast (broadcast.py) ---------------------------------------------------------
@pytest.mark.parametrize(("version", "output_type"), [(1, None), (3, "i64"), (3, "i32")])
@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), (), (0, 2)])
def test_shape_of(tmp_path, version, output_type, shape):
    a = ops.parameter([-1] * len(shape), np.float32, name="a")
    out = ops1.shape_of(a) if version == 1 else ops.shape_of(a, output_type)
    xml = single_op(tmp_path, out, [a])
    assert_layer(xml, "ShapeOf", f"opset{version}")
    check_model(xml, {"a": np.asarray(values(shape, np.float32))})

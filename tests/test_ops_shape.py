"""Shape translators (Concat, Reshape, Squeeze, Unsqueeze, Transpose, Split, VariadicSplit, Tile) and Range."""

from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import openvino.opset1 as ops1
import openvino.opset13 as ops
import openvino.opset15 as ops15
import pytest
from oracle import check_model, open_session, single_op

import ortstate

RNG = np.random.default_rng(0)
DTYPES = [np.float32, np.int32, np.int64]


def values(shape, dtype):
    return np.asarray(RNG.standard_normal(shape) * 10).astype(dtype)


def assert_layer(xml: Path, op_type: str, version: str) -> None:
    """The saved IR holds the op under test (OpenVINO did not fold or rewrite it away)."""
    found = {(e.get("type"), e.get("version")) for e in ElementTree.parse(xml).iter("layer")}
    assert (op_type, version) in found, f"{op_type} {version} not in {sorted(found)}"


def drop_input(xml: Path, op_type: str, port_index: int) -> None:
    """Rewrite the IR without an optional input (OpenVINO's Python builders always add it) and its Const."""
    tree = ElementTree.parse(xml)
    layer = next(e for e in tree.iter("layer") if e.get("type") == op_type)
    port = layer.find("input").findall("port")[port_index]
    edges = tree.getroot().find("edges")
    edge = next(e for e in edges if e.get("to-layer") == layer.get("id") and e.get("to-port") == port.get("id"))
    edges.remove(edge)
    layer.find("input").remove(port)
    layers = tree.getroot().find("layers")
    layers.remove(next(e for e in layers if e.get("id") == edge.get("from-layer")))
    tree.write(xml)


def op_types(xml: Path) -> list[str]:
    return [n.op_type for n in ortstate.convert(xml).graph.node]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_concat(tmp_path, dtype, axis):
    a = ops.parameter([2, 3, 4], dtype, name="a")
    b = ops.parameter([2, 3, 4], dtype, name="b")
    xml = single_op(tmp_path, ops.concat([a, b, a], axis), [a, b])
    assert_layer(xml, "Concat", "opset1")
    check_model(xml, {"a": values((2, 3, 4), dtype), "b": values((2, 3, 4), dtype)})


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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", [[0, 2, 1, 3], [3, 2, 1, 0], [1, 0, 3, 2], [], [2, 0, 3, 1]])
def test_transpose_constant(tmp_path, dtype, order):
    a = ops.parameter([2, 3, 4, 5], dtype, name="a")
    xml = single_op(tmp_path, ops.transpose(a, ops.constant(np.array(order, np.int64))), [a])
    assert_layer(xml, "Transpose", "opset1")
    check_model(xml, {"a": values((2, 3, 4, 5), dtype)})


@pytest.mark.parametrize("order", [[0, 2, 1], [2, 0, 1], [1, 2, 0], [2, 1, 0]])
def test_transpose_runtime_order(tmp_path, order):
    a = ops.parameter([2, 3, 4], np.float32, name="a")
    perm = ops.parameter([3], np.int32, name="perm")
    xml = single_op(tmp_path, ops.transpose(a, perm), [a, perm])
    assert "GatherND" in op_types(xml)
    check_model(xml, {"a": values((2, 3, 4), np.float32), "perm": np.array(order, np.int32)})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("axis", "parts"), [(0, 2), (1, 3), (-1, 4), (2, 1)])
def test_split(tmp_path, dtype, axis, parts):
    a = ops.parameter([4, 6, 8], dtype, name="a")
    xml = single_op(tmp_path, ops.split(a, ops.constant(np.int64(axis)), parts), [a])
    assert_layer(xml, "Split", "opset1")
    check_model(xml, {"a": values((4, 6, 8), dtype)})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("axis", "lengths"), [(1, [1, 2, 3]), (1, [2, -1, 1]), (-1, [-1, 3]), (0, [4, 0]), (1, [6])])
@pytest.mark.parametrize("dynamic", [False, True])
def test_variadic_split(tmp_path, dtype, axis, lengths, dynamic):
    a = ops.parameter([-1, -1, -1] if dynamic else [4, 6, 8], dtype, name="a")
    xml = single_op(tmp_path, ops.variadic_split(a, np.int64(axis), ops.constant(np.array(lengths, np.int64))), [a])
    assert_layer(xml, "VariadicSplit", "opset1")
    check_model(xml, {"a": values((4, 6, 8), dtype)})


def test_variadic_split_runtime_lengths(tmp_path):
    a = ops.parameter([4, 6], np.float32, name="a")
    lengths = ops.parameter([3], np.int32, name="lengths")
    xml = single_op(tmp_path, ops.variadic_split(a, np.int64(1), lengths), [a, lengths])
    for given in ([1, -1, 2], [3, 3, 0]):
        check_model(xml, {"a": values((4, 6), np.float32), "lengths": np.array(given, np.int32)})


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


# -- ShapeOf, Broadcast (broadcast.py) ---------------------------------------------------------
@pytest.mark.parametrize(("version", "output_type"), [(1, None), (3, "i64"), (3, "i32")])
@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), (), (0, 2)])
def test_shape_of(tmp_path, version, output_type, shape):
    a = ops.parameter([-1] * len(shape), np.float32, name="a")
    out = ops1.shape_of(a) if version == 1 else ops.shape_of(a, output_type)
    xml = single_op(tmp_path, out, [a])
    assert_layer(xml, "ShapeOf", f"opset{version}")
    check_model(xml, {"a": np.asarray(values(shape, np.float32))})


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

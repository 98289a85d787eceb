"""TensorIterator-1 and Loop-5 against OpenVINO (and, where cheap, a numpy reference of the loop)."""

import numpy as np
import onnx
import openvino as ov
import openvino.opset8 as ops
import pytest
from openvino.passes import LowLatency2, Manager
from oracle import RESET, assert_close, check_model, check_steps, open_session, single_op

import ortstate
from ortstate.errors import ConversionError
from ortstate.ir import read_ir

RNG = np.random.default_rng(0)
BASE = [2, 3, 4]  # the input shape, with the sequence length written over dim `axis`


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _ti_model(axis: int, stride: int, part: int, length: int | None, last: bool, concat: bool):
    """h' = h * w + x_t over the chunks x_t of ``x`` (``part`` wide on ``axis``), y_t = 2 * x_t.

    Outputs: last h (a merged value), last y (no back edge), h and y concatenated (y reversed)."""
    shape = list(BASE)
    shape[axis] = -1 if length is None else length
    chunk = list(BASE)
    chunk[axis] = part
    x = ops.parameter(shape, np.float32, name="x")
    h0 = ops.parameter(chunk, np.float32, name="h")
    w = ops.parameter(chunk, np.float32, name="w")
    xi, hi, wi = (ops.parameter(chunk, np.float32) for _ in range(3))
    # Multiply first: add(x_t, h) straight from the parameters hits an OpenVINO CPU aliasing bug.
    hn = ops.add(ops.multiply(hi, wi), xi)
    y = ops.multiply(xi, ops.constant(np.float32(2)))
    r_h, r_y = ops.result(hn), ops.result(y)
    ti = ops.tensor_iterator()
    ti.set_body(ov.Model([r_h, r_y], [xi, hi, wi]))
    start, end = (0, -1) if stride > 0 else (-1, 0)
    ti.set_sliced_input(xi, x.output(0), start, stride, part, end, axis)
    ti.set_merged_input(hi, h0.output(0), r_h.output(0))
    ti.set_invariant_input(wi, w.output(0))
    outs = []
    if last:
        outs += [ti.get_iter_value(r_h.output(0), -1), ti.get_iter_value(r_y.output(0), -1)]
    if concat:
        outs += [
            ti.get_concatenated_slices(r_h.output(0), start, stride, part, end, axis),
            ti.get_concatenated_slices(r_y.output(0), end, -stride, part, start, axis),
        ]
    return outs, [x, h0, w]


def _ti_reference(x, h, w, axis, stride, part, last, concat):
    chunks = [np.take(x, range(i, i + part), axis) for i in range(0, x.shape[axis], part)]
    hs, ys = [], []
    for chunk in chunks[:: 1 if stride > 0 else -1]:
        h = h * w + chunk
        hs.append(h)
        ys.append(2 * chunk)
    outs = [hs[-1], ys[-1]] if last else []
    if concat:
        order = 1 if stride > 0 else -1
        outs += [np.concatenate(hs[::order], axis), np.concatenate(ys[::-order], axis)]
    return outs


def _ti_feeds(axis: int, part: int, length: int) -> dict[str, np.ndarray]:
    shape, chunk = list(BASE), list(BASE)
    shape[axis], chunk[axis] = length, part
    return {"x": _rand(*shape), "h": _rand(*chunk), "w": _rand(*chunk)}


def _check_reference(want: list[np.ndarray], feeds: dict[str, np.ndarray], *args) -> None:
    """OpenVINO itself agrees with the numpy loop (guards against oracle bugs)."""
    ref = _ti_reference(feeds["x"], feeds["h"], feeds["w"], *args)
    assert len(want) == len(ref)
    for i, (w, r) in enumerate(zip(want, ref)):
        assert_close(w, r.astype(np.float32), f"OpenVINO output {i} vs numpy", 1e-5, 1e-5)


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("stride", [1, -1])
@pytest.mark.parametrize("part", [1, 2])
def test_tensor_iterator_slices(tmp_path, axis, stride, part):
    outs, params = _ti_model(axis, stride * part, part, 6, last=True, concat=True)
    xml = single_op(tmp_path, outs, params)
    feeds = _ti_feeds(axis, part, 6)
    want = check_model(xml, feeds)
    _check_reference(want, feeds, axis, stride, part, True, True)


@pytest.mark.parametrize("last, concat", [(True, False), (False, True)])
def test_tensor_iterator_output_kinds(tmp_path, last, concat):
    outs, params = _ti_model(1, 1, 1, 5, last=last, concat=concat)
    xml = single_op(tmp_path, outs, params)
    feeds = _ti_feeds(1, 1, 5)
    _check_reference(check_model(xml, feeds), feeds, 1, 1, 1, last, concat)
    graph = ortstate.convert(xml).graph
    assert [n.op_type for n in graph.node].count("Loop") == 1
    loop = next(n for n in graph.node if n.op_type == "Loop")
    # h is always carried; y gets a carried slot only when its last value is an output, a scan when concatenated
    assert len(loop.output) == (2 if last else 3)


@pytest.mark.parametrize("axis", [0, 2])
@pytest.mark.parametrize("stride", [2, -2])
def test_tensor_iterator_dynamic_length(tmp_path, axis, stride):
    outs, params = _ti_model(axis, stride, 2, None, last=True, concat=True)
    xml = single_op(tmp_path, outs, params)
    steps = [_ti_feeds(axis, 2, 6), _ti_feeds(axis, 2, 2), _ti_feeds(axis, 2, 8)]
    check_steps(xml, steps, check_states=False)
    graph = ortstate.convert(xml).graph
    assert "Shape" in [n.op_type for n in graph.node]  # the trip count is read at run time


def test_tensor_iterator_part_size_must_match_stride(tmp_path):
    outs, params = _ti_model(1, 1, 2, 6, last=True, concat=False)
    xml = single_op(tmp_path, outs, params, name="bad")
    with pytest.raises(ConversionError) as info:
        ortstate.convert(xml)
    graph = read_ir(xml)
    layer = graph.of_type("TensorIterator")[0]
    assert str(info.value) == (
        f"{graph.source}: {layer.describe()}: "
        "sliced input on axis 1: expected part_size == |stride|, got part_size=2, stride=1"
    )


@pytest.mark.parametrize(
    "start, end, stride, chunks",
    [(1, -2, 1, [1, 2, 3, 4]), (-2, 0, -1, [4, 3, 2, 1, 0]), (4, 1, -1, [4, 3, 2, 1]), (2, 5, 1, [2, 3, 4, 5])],
)
def test_tensor_iterator_start_end(tmp_path, start, end, stride, chunks):
    """start/end are inclusive indices, negative ones counting from the end (the TensorIterator-1 spec).
    Checked against numpy only: OpenVINO's CPU plugin takes the count from start/end but always reads
    from the first (stride > 0) or last (stride < 0) chunk, and rejects a non-negative end."""
    x = ops.parameter([2, 6], np.float32, name="x")
    xi = ops.parameter([2, 1], np.float32)
    r = ops.result(ops.multiply(xi, ops.constant(np.float32(1))))
    ti = ops.tensor_iterator()
    ti.set_body(ov.Model([r], [xi]))
    ti.set_sliced_input(xi, x.output(0), start, stride, 1, end, 1)
    xml = single_op(tmp_path, ti.get_concatenated_slices(r.output(0), 0, 1, 1, -1, 1), [x])
    feeds = {"x": _rand(2, 6)}
    for explicit in (False, True):
        got = open_session(xml, explicit).run(None, feeds)[0]
        assert_close(got, feeds["x"][:, chunks], f"explicit={explicit}")


def _loop_model(trip, cond, *, with_iteration: bool, condition_limit: bool, iteration_type=np.int64, rank1=False):
    """acc' = acc * 0.5 + x + i, s' = s * 2 (scalar); continue while s' < limit when ``condition_limit``.

    Outputs: last acc, acc of every iteration concatenated on axis 0, last s."""
    x = ops.parameter([2, 3], np.float32, name="x")
    acc0 = ops.parameter([2, 3], np.float32, name="acc")
    s0 = ops.parameter([], np.float32, name="s")
    limit = ops.parameter([], np.float32, name="limit")
    i = ops.parameter([1] if rank1 else [], iteration_type)
    xi, acci, si, limi = (ops.parameter(p.get_partial_shape(), np.float32) for p in (x, acc0, s0, limit))
    acc = ops.add(ops.multiply(acci, ops.constant(np.float32(0.5))), xi)
    if with_iteration:
        acc = ops.add(acc, ops.convert(i, "f32"))
    s = ops.multiply(si, ops.constant(np.float32(2)))
    keep_going = ops.less(s, limi) if condition_limit else ops.constant(True)
    stacked = ops.unsqueeze(acc, ops.constant(np.array([0], np.int64)))
    results = [ops.result(keep_going), ops.result(acc), ops.result(stacked), ops.result(s)]
    loop = ops.loop(trip, cond)
    loop.set_function(ov.Model(results, [i, xi, acci, si, limi]))
    loop.set_special_body_ports([0, 0])
    loop.set_invariant_input(xi, x.output(0))
    loop.set_merged_input(acci, acc0.output(0), results[1].output(0))
    loop.set_merged_input(si, s0.output(0), results[3].output(0))
    loop.set_invariant_input(limi, limit.output(0))
    outs = [
        loop.get_iter_value(results[1].output(0), -1),
        loop.get_concatenated_slices(results[2].output(0), 0, 1, 1, -1, 0),
        loop.get_iter_value(results[3].output(0), -1),
    ]
    return outs, [x, acc0, s0, limit]


def _loop_feeds(s: float = 1.0, limit: float = 1000.0) -> dict[str, np.ndarray]:
    return {"x": _rand(2, 3), "acc": _rand(2, 3), "s": np.array(s, np.float32), "limit": np.array(limit, np.float32)}


def _loop_reference(feeds, trip: int, with_iteration: bool) -> list[np.ndarray]:
    acc, s, accs = feeds["acc"], feeds["s"], []
    for i in range(trip):
        acc = acc * np.float32(0.5) + feeds["x"] + (np.float32(i) if with_iteration else 0)
        s = s * np.float32(2)
        accs.append(acc)
        if s >= feeds["limit"]:
            break
    return [acc, np.stack(accs), s]


@pytest.mark.parametrize("with_iteration", [False, True])
def test_loop_constant_trip_count(tmp_path, with_iteration):
    outs, params = _loop_model(
        ops.constant(np.int64(4)), ops.constant(True), with_iteration=with_iteration, condition_limit=False
    )
    xml = single_op(tmp_path, outs, params)
    feeds = _loop_feeds()
    want = check_model(xml, feeds)
    for w, r in zip(want, _loop_reference(feeds, 4, with_iteration)):
        assert_close(w, np.asarray(r, np.float32), "OpenVINO vs numpy")


@pytest.mark.parametrize("trip_type", [np.int64, np.int32])
@pytest.mark.parametrize("iteration_type, rank1", [(np.int64, False), (np.int32, True)])
def test_loop_parameter_trip_count(tmp_path, trip_type, iteration_type, rank1):
    trip = ops.parameter([], trip_type, name="trip")
    outs, params = _loop_model(
        trip, ops.constant(True), with_iteration=True, condition_limit=False, iteration_type=iteration_type, rank1=rank1
    )
    xml = single_op(tmp_path, outs, [trip, *params])
    # zero iterations first (see test_loop_computed_trip_count_and_condition)
    steps = [{"trip": np.array(n, trip_type), **_loop_feeds()} for n in (0, 3, 1, 6)]
    check_steps(xml, steps, check_states=False)


@pytest.mark.parametrize("trip", [-1, 10])
def test_loop_data_dependent_condition(tmp_path, trip):
    """A while loop: s doubles until it reaches the limit (or the trip count ends it first)."""
    outs, params = _loop_model(
        ops.constant(np.int64(trip)), ops.constant(True), with_iteration=True, condition_limit=True
    )
    xml = single_op(tmp_path, outs, params)
    steps = [_loop_feeds(1.0, 20.0), _loop_feeds(0.5, 3.0), _loop_feeds(1.0, 1e6)]
    check_steps(xml, steps, check_states=False)
    for step in steps:
        got = open_session(xml).run(None, step)
        ref = _loop_reference(step, trip if trip > 0 else 10**9, True)
        for g, r in zip(got, ref):
            assert_close(g, np.asarray(r, np.float32), "ortstate vs numpy")


def test_loop_computed_trip_count_and_condition(tmp_path):
    """Trip count and execution condition computed from inputs (i32 trip count n + 1; run if n > 0, so n = 0
    runs no iteration: last values are the initial ones, concatenations empty). Zero iterations come first:
    OpenVINO's CPU plugin returns the previous run's concatenation after a later zero-iteration run."""
    n = ops.parameter([1], np.int32, name="n")
    trip = ops.add(n, ops.constant(np.array([1], np.int32)))
    cond = ops.greater(n, ops.constant(np.array([0], np.int32)))
    outs, params = _loop_model(trip, cond, with_iteration=True, condition_limit=False)
    xml = single_op(tmp_path, outs, [n, *params])
    steps = [{"n": np.array([k], np.int32), **_loop_feeds()} for k in (0, 2, 5)]
    check_steps(xml, steps, check_states=False)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("trip", ["length", "parameter", "condition"])
def test_loop_sliced_input(tmp_path, axis, trip):
    """Loop-5 with a sliced input of dynamic length (as hybrid LLMs' Mamba loops have). The trip count is
    the length, a Parameter (at most the length: OpenVINO fails beyond it), or -1 with the body stopping
    after the last chunk."""
    shape = [-1, 3] if axis == 0 else [3, -1]
    x = ops.parameter(shape, np.float32, name="x")
    acc0 = ops.parameter([3], np.float32, name="acc")
    xi = ops.parameter([1, 3] if axis == 0 else [3, 1], np.float32)
    acci, ni = ops.parameter([3], np.float32), ops.parameter([], np.int64)
    i = ops.parameter([], np.int64)
    row = ops.reshape(xi, ops.constant(np.array([3], np.int64)), False)
    acc = ops.add(ops.multiply(acci, ops.constant(np.float32(0.5))), ops.add(row, ops.convert(i, "f32")))
    going = ops.less(ops.add(i, ops.constant(np.int64(1))), ni) if trip == "condition" else ops.constant(True)
    results = [ops.result(going), ops.result(acc), ops.result(ops.multiply(xi, xi))]
    length = ops.gather(ops.shape_of(x), ops.constant(np.int64(axis)), ops.constant(np.int64(0)))
    params = [x, acc0]
    if trip == "parameter":
        params.append(ops.parameter([], np.int64, name="trip"))
        trip_count = params[-1]
    else:
        trip_count = length if trip == "length" else ops.constant(np.int64(-1))
    loop = ops.loop(trip_count, ops.constant(True))
    loop.set_function(ov.Model(results, [i, xi, acci, ni]))
    loop.set_special_body_ports([0, 0])
    loop.set_sliced_input(xi, x.output(0), 0, 1, 1, -1, axis)
    loop.set_merged_input(acci, acc0.output(0), results[1].output(0))
    loop.set_invariant_input(ni, length.output(0))
    outs = [
        loop.get_iter_value(results[1].output(0), -1),
        loop.get_concatenated_slices(results[2].output(0), 0, 1, 1, -1, axis),
    ]
    xml = single_op(tmp_path, outs, params)
    steps = []
    for size, trips in ((4, 4), (1, 1), (7, 5)):
        step = {"x": _rand(*([size, 3] if axis == 0 else [3, size])), "acc": _rand(3)}
        if trip == "parameter":
            step["trip"] = np.array(trips, np.int64)
        steps.append(step)
    check_steps(xml, steps, check_states=False)


def _stateful_ti(tmp_path, use_const_initializer: bool):
    outs, params = _ti_model(1, 1, 1, 4, last=True, concat=True)
    model = ov.Model([ops.result(o) for o in outs], params, "ti")
    manager = Manager()
    manager.register_pass(LowLatency2(use_const_initializer))
    manager.run_passes(model)
    assert any(op.get_type_name() == "ReadValue" for op in model.get_ops())
    xml = tmp_path / "ti.xml"
    ov.save_model(model, str(xml), compress_to_fp16=False)
    return xml


@pytest.mark.parametrize("use_const_initializer", [True, False])
def test_tensor_iterator_low_latency(tmp_path, use_const_initializer):
    xml = _stateful_ti(tmp_path, use_const_initializer)
    feeds = [_ti_feeds(1, 1, 4) for _ in range(4)]
    # Without the const initializer a variable starts from that step's "h" input (after each RESET).
    check_steps(xml, [feeds[0], feeds[1], RESET, feeds[2], feeds[3], RESET, feeds[0]])


def test_model_checker_accepts_loops(tmp_path):
    outs, params = _ti_model(2, -2, 2, 6, last=True, concat=True)
    model = ortstate.convert(single_op(tmp_path, outs, params))
    onnx.checker.check_model(model, full_check=True)


def test_nested_loops(tmp_path):
    """A TensorIterator inside a Loop body: the inner body reads values two scopes out."""
    x = ops.parameter([2, 5, 4], np.float32, name="x")
    h0, w = (ops.parameter([2, 1, 4], np.float32, name=n) for n in ("h", "w"))
    params = [x, h0, w]
    bx, bh, bw = (ops.parameter(p.get_partial_shape(), np.float32) for p in params)
    i = ops.parameter([], np.int64)
    xi, hi, wi = (ops.parameter([2, 1, 4], np.float32) for _ in range(3))
    r_h = ops.result(ops.add(ops.multiply(hi, wi), xi))
    ti = ops.tensor_iterator()
    ti.set_body(ov.Model([r_h], [xi, hi, wi]))
    ti.set_sliced_input(xi, bx.output(0), -1, -1, 1, 0, 1)
    ti.set_merged_input(hi, bh.output(0), r_h.output(0))
    ti.set_invariant_input(wi, bw.output(0))
    h_next = ops.add(ti.get_iter_value(r_h.output(0), -1), ops.convert(i, "f32"))
    results = [ops.result(ops.constant(True)), ops.result(h_next)]
    loop = ops.loop(ops.constant(np.int64(3)), ops.constant(True))
    loop.set_function(ov.Model(results, [i, bx, bh, bw]))
    loop.set_special_body_ports([0, 0])
    loop.set_invariant_input(bx, x.output(0))
    loop.set_merged_input(bh, h0.output(0), results[1].output(0))
    loop.set_invariant_input(bw, w.output(0))
    xml = single_op(tmp_path, loop.get_iter_value(results[1].output(0), -1), params)
    feeds = _ti_feeds(1, 1, 5)
    want = check_model(xml, feeds)
    h = feeds["h"]
    for k in range(3):
        for t in reversed(range(5)):
            h = h * feeds["w"] + feeds["x"][:, t : t + 1]
        h = h + np.float32(k)
    assert_close(want[0], h, "OpenVINO vs numpy")

"""Variables read and assigned inside TensorIterator/Loop bodies (``convert/loop_state.py``), stepped
against OpenVINO through resets and set states, in every form, and verified by ``ortstate verify``.

OpenVINO keeps such a variable from one iteration to the next and from one inference to the next
(its ``StatefulModelStateInLoopBody`` test); each case below checks that, with the variable's init
taken on the first iteration of an uninitialised variable only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino import opset5, opset6
from oracle import RESET, check_steps, open_session, query, save_ir, set_state, variable

import ortstate
from ortstate.cli import main
from ortstate.ir import read_ir

RNG = np.random.default_rng(12)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def loop(trip: Any, body: ov.Model, cond_result: int, iteration_param: int = -1) -> Any:
    """A Loop-5 running ``body`` ``trip`` times (a constant, or an output)."""
    count = ops.constant(np.array([trip], np.int64)) if isinstance(trip, int) else trip
    node = opset5.loop(count, ops.constant(np.array([True])))
    node.set_function(body)
    node.set_special_body_ports([iteration_param, cond_result])
    return node


def true_result() -> Any:
    return ops.result(ops.constant(np.array([True])))


# -- the cases --------------------------------------------------------------------------------------
def state_in_loop_body(init: str) -> tuple[ov.Model, list]:
    """StatefulModelStateInLoopBody: an outer variable feeds a Loop whose body keeps its own variable
    (no init: zeros; ``invariant``: 10 * an invariant input; ``sliced``: the first chunk of a sliced
    input, so the init differs per iteration and only the first iteration's counts)."""
    x = ops.parameter([1], np.float32, name="x")
    seq = ops.parameter([3, 1], np.float32, name="seq")
    bp1, bp2 = ops.parameter([1], np.float32, name="bp1"), ops.parameter([1], np.float32, name="bp2")
    chunk = ops.parameter([1, 1], np.float32, name="chunk")
    inner = variable("inner", [1])
    if init == "none":
        read = opset6.read_value(inner)
    elif init == "invariant":
        read = opset6.read_value(ops.multiply(bp1, ops.constant(np.array([10], np.float32))), inner)
    else:
        read = opset6.read_value(ops.reshape(chunk, ops.constant(np.array([1], np.int64)), False), inner)
    total = ops.add(ops.add(bp1, bp2), read)
    body_out = ops.result(total)
    sliced = init == "sliced"
    body_params = [bp1, bp2, chunk] if sliced else [bp1, bp2]
    body = ov.Model([body_out, true_result()], [opset6.assign(total, inner)], body_params, "body")
    outer = variable("outer", [1])
    outer_read = opset6.read_value(ops.constant(np.array([2], np.float32)), outer)
    node = loop(3, body, 1)
    node.set_invariant_input(bp1, x.output(0))
    node.set_invariant_input(bp2, outer_read.output(0))
    if sliced:  # OpenVINO's CPU plugin fails on a sliced input the body does not use
        node.set_sliced_input(chunk, seq.output(0), 0, 1, 1, -1, 0)
    out = node.get_iter_value(body_out.output(0), -1)
    outer_assign = opset6.assign(ops.add(out, ops.constant(np.array([1], np.float32))), outer)
    model = ov.Model([ops.result(out)], [outer_assign], [x, seq] if sliced else [x], "m")
    feeds = [{"x": normal(1), "seq": normal(3, 1)} if sliced else {"x": normal(1)} for _ in range(3)]
    steps = [query, *feeds, RESET, query, feeds[0], set_state("inner", np.array([-4], np.float32)), *feeds[1:]]
    return model, [*steps, set_state("outer", np.array([0.5], np.float32)), feeds[0]]


def tensor_iterator_accumulator() -> tuple[ov.Model, list]:
    """A TensorIterator over a sequence whose body sums the chunks into a [2, 3] variable: the
    running sum goes on over the next sequence, and a scan of it is the output."""
    x = ops.parameter([2, -1, 3], np.float32, name="x")
    xi = ops.parameter([2, 1, 3], np.float32, name="xi")
    acc = variable("acc", [2, 1, 3])
    new = ops.add(opset6.read_value(acc), ops.multiply(xi, ops.constant(np.float32(0.5))))
    body_out = ops.result(new)
    ti = ops.tensor_iterator()
    ti.set_body(ov.Model([body_out], [opset6.assign(new, acc)], [xi], "body"))
    ti.set_sliced_input(xi, x.output(0), 0, 1, 1, -1, 1)
    out = ti.get_concatenated_slices(body_out.output(0), 0, 1, 1, -1, 1)
    model = ov.Model([ops.result(out)], [x], "m")
    feeds = [{"x": normal(2, n, 3)} for n in (4, 1, 3)]
    return model, [*feeds, RESET, *feeds[:2], set_state("acc", normal(2, 1, 3)), feeds[2]]


def nested_loops() -> tuple[ov.Model, list]:
    """A variable in a Loop inside a Loop's body: carried through both, 2 x 3 iterations a run."""
    x = ops.parameter([2], np.float32, name="x")
    ip = ops.parameter([2], np.float32, name="ip")
    var = variable("deep", [2])
    new = ops.add(ops.multiply(opset6.read_value(ops.constant(np.ones(2, np.float32)), var), ip), ip)
    inner_out = ops.result(new)
    inner_body = ov.Model([inner_out, true_result()], [opset6.assign(new, var)], [ip], "inner")
    op = ops.parameter([2], np.float32, name="op")
    inner = loop(3, inner_body, 1)
    inner.set_invariant_input(ip, ops.multiply(op, ops.constant(np.float32(0.5))).output(0))
    outer_out = ops.result(inner.get_iter_value(inner_out.output(0), -1))
    outer_body = ov.Model([outer_out, true_result()], [op], "outer")
    outer = loop(2, outer_body, 1)
    outer.set_invariant_input(op, x.output(0))
    model = ov.Model([ops.result(outer.get_iter_value(outer_out.output(0), -1))], [x], "m")
    feeds = [{"x": normal(2)} for _ in range(3)]
    return model, [*feeds, RESET, *feeds]


def trip_count_from_input() -> tuple[ov.Model, list]:
    """A Loop whose trip count is an input and whose variable is written before it is read (the
    Assign's value does not depend on the ReadValue): each iteration reads the previous one's."""
    n = ops.parameter([1], np.int64, name="n")
    x = ops.parameter([1, 2], np.float32, name="x")
    it = ops.parameter([1], np.int64, name="it")
    xi = ops.parameter([1, 2], np.float32, name="xi")
    var = variable("last", [1, 2])
    scaled = ops.multiply(xi, ops.convert(ops.add(it, ops.constant(np.array([1], np.int64))), "f32"))
    seen = ops.add(opset6.read_value(var), ops.constant(np.float32(0)))
    body_out = ops.result(seen)
    body = ov.Model([body_out, true_result()], [opset6.assign(scaled, var)], [it, xi], "body")
    node = loop(n, body, 1, iteration_param=0)
    node.set_invariant_input(xi, x.output(0))
    model = ov.Model([ops.result(node.get_iter_value(body_out.output(0), -1))], [n, x], "m")
    feeds = [{"n": np.array([k], np.int64), "x": normal(1, 2)} for k in (3, 1, 4)]
    return model, [*feeds, RESET, *feeds]


CASES: dict[str, Callable[[], tuple[ov.Model, list]]] = {
    "state_in_loop_body": lambda: state_in_loop_body("none"),
    "state_in_loop_body_init_invariant": lambda: state_in_loop_body("invariant"),
    "state_in_loop_body_init_sliced": lambda: state_in_loop_body("sliced"),
    "tensor_iterator_accumulator": tensor_iterator_accumulator,
    "nested_loops": nested_loops,
    "trip_count_from_input": trip_count_from_input,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_loop_body_variables_match_openvino(tmp_path, name):
    model, steps = CASES[name]()
    check_steps(save_ir(model, tmp_path, name), steps)


@pytest.mark.parametrize("name", sorted(CASES))
def test_loop_body_variables_verify(tmp_path, capsys, name):
    model, _ = CASES[name]()
    xml = save_ir(model, tmp_path, name)
    extra = {
        "tensor_iterator_accumulator": ["--shape", "x=2,3,3"],
        # a random trip count may be 0, where OpenVINO's outputs are uninitialised memory
        "trip_count_from_input": ["--input", f"n={tmp_path / 'n.npy'}"],
    }.get(name, [])
    np.save(tmp_path / "n.npy", np.array([3], np.int64))
    code = main(["verify", str(xml), "--both", "--steps", "3", *extra])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "custom-op form: match" in out and "explicit form: match" in out, out


def test_loop_variables_are_carried_values(tmp_path):
    """Structure: the variable is read before the Loop, carried through it and written after it; the
    body holds no state op, and a computed init is selected inside the body by the variable's flag."""
    model, _ = state_in_loop_body("invariant")
    xml = save_ir(model, tmp_path, "m")
    custom, explicit = ortstate.convert(xml), ortstate.convert(xml, explicit_state=True)
    graph = custom.graph
    assert sorted(n.op_type for n in graph.node if n.domain == "ai.onnx.contrib") == ["Assign"] * 2 + ["ReadValue"] * 2
    (node,) = [n for n in graph.node if n.op_type == "Loop"]
    body = node.attribute[0].g
    assert not [n for n in body.node if n.domain], "state ops inside the body"
    # trip count, condition, the output's slot, then 'inner' as read before the loop; written after it
    reads = {n.output[0]: n for n in graph.node if n.op_type == "ReadValue"}
    assert len(node.input) == 4 and "inner" in str(reads[node.input[3]].attribute)
    assert [n for n in graph.node if n.op_type == "Assign" and n.input[0] == node.output[1]]
    assert [n.op_type for n in body.node].count("If") == 1  # the init, taken when fresh
    inputs = {i.name for i in explicit.graph.input}
    assert inputs == {"x", *(f"ortstate.{k}.{v}" for k in ("init", "in") for v in ("inner", "outer"))}
    onnx.checker.check_model(explicit)


def test_zero_iterations_keep_the_value(tmp_path):
    """A loop that runs no iteration writes back the value it was given: the state does not change
    (OpenVINO's CPU plugin returns uninitialised memory from such a loop: numpy decides)."""
    model, _ = trip_count_from_input()
    xml = save_ir(model, tmp_path, "m")
    for explicit in (False, True):
        session = open_session(xml, explicit)
        x = normal(1, 2)
        session.run(None, {"n": np.array([2], np.int64), "x": x})
        np.testing.assert_array_equal(session.query_state()[0].state, 2 * x)
        session.run(None, {"n": np.array([0], np.int64), "x": normal(1, 2)})
        np.testing.assert_array_equal(session.query_state()[0].state, 2 * x)


def test_read_and_assign_in_different_graphs(tmp_path):
    """A ReadValue in the main graph whose Assign sits in a loop body is refused, naming both layers."""
    x = ops.parameter([1], np.float32, name="x")
    var = variable("split", [1])
    read = opset6.read_value(ops.constant(np.zeros(1, np.float32)), var)
    bp = ops.parameter([1], np.float32, name="bp")
    doubled = ops.add(bp, bp)
    body_out = ops.result(doubled)
    node = loop(2, ov.Model([body_out, true_result()], [opset6.assign(doubled, var)], [bp], "body"), 1)
    node.set_invariant_input(bp, ops.add(read, x).output(0))
    xml = save_ir(ov.Model([ops.result(node.get_iter_value(body_out.output(0), -1))], [x], "m"), tmp_path, "m")
    graph = read_ir(xml)
    (read_layer,), (loop_layer,) = graph.of_type("ReadValue"), graph.of_type("Loop")
    (assign_layer,) = loop_layer.body.of_type("Assign")
    with pytest.raises(ortstate.StateError) as err:
        ortstate.convert(xml)
    assert str(err.value) == (
        f"{xml}: {read_layer.describe()}: variable 'split' is assigned by {assign_layer.describe()} in the body "
        f"of {loop_layer.describe()}: a ReadValue and its Assign in different graphs (a loop body and the graph "
        "around it) are not supported"
    )

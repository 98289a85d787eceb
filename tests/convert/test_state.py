"""ReadValue/Assign semantics, stepped against OpenVINO through resets, in both ONNX forms."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino import opset3, opset6
from oracle import (
    RESET,
    REWRITTEN,
    assert_close,
    check_steps,
    form_name,
    open_session,
    save_ir,
    variable,
)

import ortstate

RNG = np.random.default_rng(7)


def model(tmp_path, results, sinks, params, name="m", compress=False):
    return save_ir(ov.Model([ops.result(r) for r in results], sinks, params, name), tmp_path, name, compress)


def set_state(name: str, value: np.ndarray):
    """A step setting one variable in both runtimes."""

    def step(runner):
        for s in runner.query_state():
            if s.name == name:
                if isinstance(runner, ov.InferRequest):
                    s.state = ov.Tensor(value)
                else:
                    s.state = value

    return step


def reset_one(name: str):
    def step(runner):
        for s in runner.query_state():
            if s.name == name:
                s.reset()

    return step


def feeds(n: int, shape=(1, 3), dtype=np.float32, name="x"):
    return [{name: RNG.standard_normal(shape).astype(dtype)} for _ in range(n)]


def test_v3_accumulator(tmp_path):
    x = ops.parameter([1, 3], np.float32, name="x")
    rv = opset3.read_value(ops.constant(np.full((1, 3), 0.5, np.float32)), "acc")
    add = ops.add(rv, x)
    xml = model(tmp_path, [add], [opset3.assign(add, "acc")], [x])
    check_steps(xml, [*feeds(3), RESET, *feeds(2), set_state("acc", np.ones((1, 3), np.float32)), *feeds(2)])


def test_v6_accumulator_init_from_shape_of_input(tmp_path):
    x = ops.parameter([1, -1], np.float32, name="x")
    var = variable("acc", [1, -1])
    rv = opset6.read_value(ops.broadcast(ops.constant(np.float32(0)), ops.shape_of(x)), var)
    add = ops.add(rv, x)
    xml = model(tmp_path, [add], [opset6.assign(add, var)], [x], compress=True)
    check_steps(xml, [*feeds(3, (1, 4)), RESET, *feeds(3, (1, 2))])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64])
def test_no_init_zeros(tmp_path, dtype):
    x = ops.parameter([2, 3], dtype, name="x")
    var = variable("s", [2, 3], dtype)
    rv = opset6.read_value(var)
    add = ops.add(rv, x)
    xml = model(tmp_path, [add, ops.multiply(rv, x)], [opset6.assign(add, var)], [x])
    steps = [{"x": (RNG.standard_normal((2, 3)) * 4).astype(dtype)} for _ in range(5)]
    tol = 2e-3 if dtype == np.float16 else 1e-6  # f16 math may round one ulp differently
    check_steps(xml, [*steps[:3], RESET, *steps[3:]], rtol=tol, atol=tol)


def bf16_accumulator(tmp_path):
    """``v = bf16(v + bf16(x))``, output ``f32(v)``: every value is a bf16 value."""
    x = ops.parameter([4], np.float32, name="x")
    var = variable("v", [4], ov.Type.bf16)
    new = ops.add(opset6.read_value(var), ops.convert(x, "bf16"))
    return model(tmp_path, [ops.convert(new, "f32")], [opset6.assign(new, var)], [x])


BF16_STEP = np.array([1.001, 3.3, 1e-3, 100.7], np.float32)


def test_bf16_variable_rounds_to_bf16(tmp_path):
    """bf16 math rounds each result to bf16 (round to nearest even); numpy with ml_dtypes is the oracle,
    exactly, in every form.

    OpenVINO is not: what its CPU plugin does with a bf16 graph depends on the CPU. Where it has no
    bf16 support (this AVX2 machine) it converts the graph to f32 and rounds only what it stores in
    the variable, so its outputs are not bf16 values; where it has (AVX-512 BF16, AMX; some releases
    count any AVX-512) it keeps the graph in bf16 and its outputs are.
    """
    xml = bf16_accumulator(tmp_path)
    for explicit in (False, True, REWRITTEN):
        session = open_session(xml, explicit)
        state = np.zeros(4, ml_dtypes.bfloat16)
        for step in range(6):
            if step == 4:
                session.reset_state()
                state = np.zeros(4, ml_dtypes.bfloat16)
            state = (state.astype(np.float32) + BF16_STEP.astype(ml_dtypes.bfloat16).astype(np.float32)).astype(
                ml_dtypes.bfloat16
            )
            (out,) = session.run(None, {"x": BF16_STEP})
            where = f"{form_name(explicit)} step {step}"
            assert_close(out, state.astype(np.float32), f"{where} output", rtol=0, atol=0)
            assert_close(session.query_state()[0].state, state, f"{where} variable", rtol=0, atol=0)


def test_bool_variable_toggles(tmp_path):
    x = ops.parameter([4], bool, name="x")
    var = variable("flags", [4], ov.Type.boolean)
    rv = opset6.read_value(var)
    new = ops.logical_xor(rv, x)
    xml = model(tmp_path, [new], [opset6.assign(new, var)], [x])
    steps = [{"x": RNG.random(4) > 0.5} for _ in range(4)]
    check_steps(xml, [*steps, RESET, *steps])


def test_init_is_the_parameter_itself(tmp_path):
    """LowLatency2 without a const initializer: the init is a Parameter, read on the first run only."""
    h0 = ops.parameter([1, 4], np.float32, name="h0")
    x = ops.parameter([1, 4], np.float32, name="x")
    var = variable("h", [1, 4])
    rv = opset6.read_value(h0, var)
    new = ops.tanh(ops.add(rv, x)) if hasattr(ops, "tanh") else ops.add(rv, x)
    xml = model(tmp_path, [new], [opset6.assign(new, var)], [h0, x])
    steps = [
        {"h0": RNG.standard_normal((1, 4)).astype(np.float32), "x": RNG.standard_normal((1, 4)).astype(np.float32)}
        for _ in range(6)
    ]
    check_steps(xml, [*steps[:3], RESET, *steps[3:]])


def test_reads_see_values_from_before_the_run(tmp_path):
    """Two variables swapped every step: any Assign taking effect mid-run would show."""
    x = ops.parameter([2], np.float32, name="x")
    va, vb = variable("a", [2]), variable("b", [2])
    ra = opset6.read_value(ops.constant(np.array([1, 2], np.float32)), va)
    rb = opset6.read_value(ops.constant(np.array([3, 4], np.float32)), vb)
    new_a = ops.add(rb, x)
    new_b = ops.multiply(ra, ops.constant(np.float32(2)))
    xml = model(tmp_path, [ra, rb], [opset6.assign(new_a, va), opset6.assign(new_b, vb)], [x])
    check_steps(xml, [*feeds(4, (2,)), RESET, *feeds(2, (2,))])


@pytest.mark.parametrize("explicit", [False, True])
def test_assign_independent_of_read(tmp_path, explicit):
    """Assign(x) does not depend on ReadValue: ORT may run it first; the read must still see the old value.

    Checked against numpy: OpenVINO's CPU plugin aliases a state fed straight from a Parameter.
    """
    x = ops.parameter([3], np.float32, name="x")
    var = variable("last", [3])
    rv = opset6.read_value(var)
    xml = model(tmp_path, [ops.add(rv, ops.constant(np.float32(0)))], [opset6.assign(x, var)], [x])
    session = open_session(xml, explicit)
    previous = np.zeros(3, np.float32)
    for step in range(5):
        if step == 3:
            session.reset_state()
            previous = np.zeros(3, np.float32)
        value = RNG.standard_normal(3).astype(np.float32)
        np.testing.assert_array_equal(session.run(None, {"x": value})[0], previous)
        np.testing.assert_array_equal(session.query_state()[0].state, value)
        previous = value


def test_set_state_and_per_variable_reset(tmp_path):
    x = ops.parameter([1, 2], np.float32, name="x")
    va, vb = variable("a", [1, 2]), variable("b", [1, 2])
    ra = opset6.read_value(ops.constant(np.full((1, 2), 1.0, np.float32)), va)
    rb = opset6.read_value(ops.constant(np.full((1, 2), 2.0, np.float32)), vb)
    na, nb = ops.add(ra, x), ops.subtract(rb, x)
    xml = model(tmp_path, [na, nb], [opset6.assign(na, va), opset6.assign(nb, vb)], [x])
    check_steps(
        xml,
        [
            *feeds(2, (1, 2)),
            set_state("b", np.array([[10.0, 20.0]], np.float32)),
            *feeds(1, (1, 2)),
            reset_one("a"),
            *feeds(2, (1, 2)),
            RESET,
            *feeds(1, (1, 2)),
        ],
    )


def test_expensive_init_is_guarded_and_correct(tmp_path):
    """An init that needs a MatMul runs inside an If, only on first runs and after resets."""
    enc = ops.parameter([1, 4, 8], np.float32, name="enc")
    x = ops.parameter([1, 4, 8], np.float32, name="x")
    var = variable("cross", [1, 4, 8])
    w = ops.constant(RNG.standard_normal((8, 8)).astype(np.float32))
    rv = opset6.read_value(ops.matmul(enc, w, False, False), var)
    new = ops.add(rv, x)
    xml = model(tmp_path, [new], [opset6.assign(new, var)], [enc, x])
    steps = [
        {
            "enc": RNG.standard_normal((1, 4, 8)).astype(np.float32),
            "x": RNG.standard_normal((1, 4, 8)).astype(np.float32),
        }
        for _ in range(5)
    ]
    check_steps(xml, [*steps[:2], RESET, *steps[2:]], rtol=1e-4, atol=1e-4)
    for explicit in (False, True):
        graph = ortstate.convert(xml, explicit_state=explicit).graph
        main_ops = [n.op_type for n in graph.node]
        assert "MatMul" not in main_ops and main_ops.count("If") == 1
        branch = next(n for n in graph.node if n.op_type == "If").attribute
        then = next(a.g for a in branch if a.name == "then_branch")
        assert [n.op_type for n in then.node].count("MatMul") == 1


def test_interleaved_requests_are_independent(tmp_path):
    x = ops.parameter([1, 3], np.float32, name="x")
    var = variable("acc", [1, 3])
    rv = opset6.read_value(var)
    add = ops.add(rv, x)
    xml = model(tmp_path, [add], [opset6.assign(add, var)], [x])
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(xml)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for explicit in (False, True):
        session = open_session(xml, explicit)
        ov_reqs = [compiled.create_infer_request() for _ in range(2)]
        our_reqs = [session.create_infer_request() for _ in range(2)]
        for step in range(6):
            i = step % 2 if step < 4 else 0
            feed = {"x": RNG.standard_normal((1, 3)).astype(np.float32)}
            want = ov_reqs[i].infer(feed)[0]
            got = our_reqs[i].run(None, feed)[0]
            np.testing.assert_allclose(got, want, rtol=1e-6)
            if step == 3:
                ov_reqs[1].reset_state()
                our_reqs[1].reset_state()
        np.testing.assert_allclose(our_reqs[1].query_state()[0].state, ov_reqs[1].query_state()[0].state.data)
        # The session's own default request never ran.
        assert session.query_state()[0].state.shape == (1, 3) and not session.query_state()[0].state.any()


def test_failed_run_changes_no_variable(tmp_path):
    x = ops.parameter([-1], np.float32, name="x")
    n = ops.parameter([], np.int64, name="n")
    var = variable("acc", [3])
    rv = opset6.read_value(var)
    add = ops.add(rv, ops.reshape(x, ops.constant(np.array([3], np.int64)), False) if False else x)
    out = ops.add(add, ops.convert(n, "f32"))
    xml = model(tmp_path, [out], [opset6.assign(add, var)], [x, n])
    for explicit in (False, True):
        session = open_session(xml, explicit)
        good = {"x": np.ones(3, np.float32), "n": np.array(0, np.int64)}
        session.run(None, good)
        before = session.query_state()[0].state
        with pytest.raises(ortstate.RunError, match="no variable was changed"):
            session.run(None, {"x": np.ones(4, np.float32), "n": np.array(0, np.int64)})
        np.testing.assert_array_equal(session.query_state()[0].state, before)
        with pytest.raises(ortstate.RunError, match="missing input"):
            session.run(None, {"x": np.ones(3, np.float32)})
        got = session.run(None, good)[0]
        np.testing.assert_array_equal(got, before + 1)


def test_state_setter_validates(tmp_path):
    x = ops.parameter([1, -1], np.float32, name="x")
    var = variable("acc", [1, -1])
    rv = opset6.read_value(var)
    add = ops.add(rv, x)
    xml = model(tmp_path, [add], [opset6.assign(add, var)], [x])
    session = open_session(xml)
    state = session.query_state()[0]
    assert state.state.shape == (1, 0)
    with pytest.raises(ortstate.StateError, match=r"variable 'acc': cannot set state: dtype float64, expected float32"):
        state.state = np.zeros((1, 2))
    with pytest.raises(
        ortstate.StateError, match=r"variable 'acc': cannot set state: shape \[2, 2\], expected \[1,\?\]"
    ):
        state.state = np.zeros((2, 2), np.float32)
    state.state = np.full((1, 2), 3, np.float32)
    assert session.run(None, {"x": np.ones((1, 2), np.float32)})[0].tolist() == [[4, 4]]


def test_metadata_describes_variables(tmp_path):
    x = ops.parameter([1, ov.Dimension(1, 10)], np.float16, name="x")
    var = variable("acc", [1, ov.Dimension(1, 10)], np.float16)
    rv = opset6.read_value(ops.broadcast(ops.constant(np.float16(0)), ops.shape_of(x)), var)
    add = ops.add(rv, x)
    xml = model(tmp_path, [add], [opset6.assign(add, var)], [x])
    m = ortstate.convert(xml)
    onnx.checker.check_model(m)
    from ortstate.meta import read_meta

    (v,) = read_meta(m).variables
    assert (v.id, v.element_type, v.dtype, v.shape, v.init, v.carrier) == (
        "acc",
        "f16",
        "float16",
        [1, [1, 10]],
        "computed",
        "float32",
    )
    # OpenVINO cannot query a bounded dynamic variable before it is written, so no RESET step here.
    check_steps(xml, [{"x": np.ones((1, 3), np.float16)}, {"x": np.full((1, 3), 2, np.float16)}])
    session = ortstate.StatefulSession(m)
    assert session.query_state()[0].state.shape == (1, 1)

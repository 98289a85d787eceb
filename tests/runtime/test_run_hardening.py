"""Hard run-time conditions, round 2 (issue 11), in every form: the explicit fast path after a run with
run options, feeds in the other byte order, empty batches ONNX Runtime's kernels crash on, feeds and
output names of the wrong kind, the caller's SessionOptions, and zero-size states with absurd dims.

Each call either works (and gives what a clean run gives) or raises an OrtStateError changing nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
import pytest
from isolated import outcome, run_isolated
from oracle import (
    REPO,
    REWRITTEN,
    assert_same,
    check_bad_calls_change_nothing,
    check_steps,
    open_session,
    ort_states,
    ov_request,
    ov_run,
)

import ortstate

ROOT = REPO
LSTM = ROOT / "models/lstm_1l/model.xml"  # x f32 [1,?,8]; h, c f32 [1,1,16]
GRU = ROOT / "models/gru_1l/model.xml"
DYNBATCH = ROOT / "models/lstm_2l_dynbatch/model.xml"  # x f32 [?,?,8]; h, c f32 [2,?,16]
KV = ROOT / "models/kv_cache_toy/model.xml"  # past f32 [?,2,?,4]
ACC = ROOT / "models/accumulator/model.xml"
FORMS = [pytest.param(False, id="custom-op"), pytest.param(True, id="explicit"), pytest.param(REWRITTEN, id=REWRITTEN)]
RNG = np.random.default_rng(111)


def lstm_feed(steps: int) -> dict[str, np.ndarray]:
    return {"x": RNG.standard_normal((1, steps, 8)).astype(np.float32)}


@pytest.mark.parametrize("explicit", FORMS)
def test_fast_path_after_a_run_with_run_options_and_a_new_shape(explicit: bool) -> None:
    """Steady runs bind the explicit form's fast path; a run with run_options and another input shape
    takes the general path and commits; the runs after it must read what it committed."""
    session = open_session(LSTM, explicit)
    feeds = [lstm_feed(n) for n in (1, 1, 1, 1, 3, 1, 1, 1, 2, 2, 2)]
    reference = session.create_infer_request()
    want = [reference.run(None, f) for f in feeds]
    request = session.create_infer_request()
    for step, feed in enumerate(feeds):
        options = ort.RunOptions() if step in (4, 9) else None
        for got, expected in zip(request.run(None, feed, options), want[step]):
            np.testing.assert_array_equal(got, expected, err_msg=f"step {step}")
    assert_same(ort_states(request), ort_states(reference))


@pytest.mark.parametrize("explicit", FORMS)
def test_growing_cache_with_a_computed_init_through_resets(explicit: bool) -> None:
    """A KV cache whose init is computed (behind its init flag) grows every step while the inputs keep
    their shapes: the custom-op form's bound fast path serves those steps (its state is not bound),
    and after a reset, or with a state set, the next step computes the init again or reads the set
    value. Each stretch is compared with a fresh OpenVINO request (OpenVINO's CPU plugin reads this
    cache's stale memory after a reset of its own request)."""
    rng = np.random.default_rng(5)
    feeds = [
        {"input": rng.standard_normal((1, 1, 8)).astype(np.float32), "beam_idx": np.zeros(1, np.int32)}
        for _ in range(12)
    ]
    past = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    request = open_session(KV, explicit).create_infer_request()
    for start, stop, preset in ((0, 5, None), (5, 9, None), (9, 12, past)):
        request.reset_state()
        oracle = ov_request(KV)
        if preset is not None:
            request.variable("past").state = preset
            oracle.query_state()[0].state = ov.Tensor(preset.copy())
        for k in range(start, stop):
            np.testing.assert_allclose(
                request.run(None, feeds[k])[0], ov_run(oracle, feeds[k])[0], rtol=1e-3, atol=1e-3
            )
        np.testing.assert_allclose(request.variable("past").state, oracle.query_state()[0].state.data, rtol=1e-3)
    if not explicit:
        assert request.bound


def _other_byte_order(a: np.ndarray) -> np.ndarray:
    swapped = a.astype(a.dtype.newbyteorder("S"))
    assert not swapped.dtype.isnative and np.array_equal(swapped, a)
    return swapped


@pytest.mark.parametrize("explicit", FORMS)
def test_feeds_and_states_in_the_other_byte_order(explicit: bool) -> None:
    """``>f4`` on this machine (``<f4`` on a big-endian one) holds the same numbers: runs and states
    set from such arrays give exactly what native arrays give (ONNX Runtime reads raw bytes)."""
    session = open_session(LSTM, explicit)
    feeds = [lstm_feed(n) for n in (2, 1, 1, 1, 1)]
    h0 = RNG.standard_normal((1, 1, 16)).astype(np.float32)
    reference, request = session.create_infer_request(), session.create_infer_request()
    reference.variable("h_inh_out").state = h0
    request.variable("h_inh_out").state = _other_byte_order(h0)
    assert_same(ort_states(request), ort_states(reference))
    for step, feed in enumerate(feeds):
        want = reference.run(None, feed)
        got = request.run(None, {"x": _other_byte_order(feed["x"])})
        np.testing.assert_array_equal(got[0], want[0], err_msg=f"step {step}")
        assert_same(ort_states(request), ort_states(reference))


DYNBATCH_SCENARIO = """
import sys
import numpy as np
import ortstate
session = ortstate.StatefulSession("models/lstm_2l_dynbatch/model.xml", form=sys.argv[1])
rng = np.random.default_rng(0)

def batch_0():
    before = {v.name: v.state for v in session.query_state()}
    try:
        session.run(None, {"x": np.zeros((0, 2, 8), np.float32)})
        print("ran")
    except ortstate.RunError as exc:
        print("refused:", exc)
    assert all(np.array_equal(v.state, before[v.name]) for v in session.query_state())

batch_0()  # the states are empty too: [2, 0, 16]
for var in session.query_state():
    var.state = rng.standard_normal((2, 1, 16)).astype(np.float32)
print("then:", session.run(None, {"x": rng.standard_normal((1, 3, 8)).astype(np.float32)})[0].shape)
batch_0()
print("no steps:", session.run(None, {"x": np.ones((1, 0, 8), np.float32)})[0].shape)  # the kernel takes it
"""


@pytest.mark.parametrize("form", ["custom-op", "explicit"])
def test_batch_0_to_a_dynamic_batch_lstm_is_refused(form: str) -> None:
    """ONNX Runtime's LSTM kernel crashes the process on an empty batch: the run is refused instead,
    changing nothing; an empty sequence (which the kernel takes) still runs."""
    proc = run_isolated(DYNBATCH_SCENARIO, form)
    assert proc.returncode == 0, outcome(proc)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4 and lines[0] == lines[2] and lines[1] == "then: (1, 3, 16)", lines
    assert lines[0].startswith("refused: input 'x' has a batch of 0 (dim 0): shape [0, 2, 8], which ONNX Runtime's "
                               "LSTM node "), lines  # fmt: skip
    assert "(layer '__module.rnn/aten::lstm/LSTMSequence' (id 20, LSTMSequence-5)) cannot take" in lines[0]
    assert lines[0].endswith("; no variable was changed")
    assert lines[3] == "no steps: (1, 0, 16)"


@pytest.mark.parametrize("xml", [LSTM, GRU], ids=["lstm", "gru"])
def test_empty_sequences_still_run_as_openvino(xml: Path) -> None:
    """The guard is on the batch: a chunk of 0 steps runs, as in OpenVINO (outputs and states)."""
    check_steps(xml, [lstm_feed(3), {"x": np.zeros((1, 0, 8), np.float32)}, lstm_feed(2)])


@pytest.mark.parametrize("explicit", FORMS)
def test_feeds_and_output_names_of_the_wrong_kind(explicit: bool) -> None:
    session = open_session(LSTM, explicit)
    good = [lstm_feed(1) for _ in range(7)]
    x = good[0]["x"]

    def call(names: object, feeds: object) -> object:
        return lambda r: r.run(names, feeds)  # type: ignore[arg-type]

    bad = [
        (call(None, [x]), ortstate.RunError, "the feeds must be a mapping of input names to arrays, not list"),
        (call(None, None), ortstate.RunError, "the feeds must be a mapping .*, not NoneType"),
        (call(None, ("x", x)), ortstate.RunError, "not tuple"),
        (call(None, {1: x}), ortstate.RunError, r"input names are strings, got 1 \(int\)"),
        (call([1], {"x": x}), ortstate.RunError, r"output names are strings, got 1 \(int\)"),
        (call([["y"]], {"x": x}), ortstate.RunError, r"output names are strings, got \['y'\] \(list\)"),
        (call("y", {"x": x}), ortstate.RunError, "output_names must be a list of output names or None, not str"),
        (call(5, {"x": x}), ortstate.RunError, "output_names must be a list of output names or None, not int"),
        (lambda r: r.infer([x]), ortstate.RunError, "the feeds must be a mapping"),
        (call(None, {"x": None}), ortstate.RunError, "run failed"),
    ]
    check_bad_calls_change_nothing(session, good, bad)
    with pytest.raises(ortstate.RunError, match="the feeds must be a mapping"):
        session.run(None, [x])  # type: ignore[arg-type]


@pytest.mark.parametrize("explicit", FORMS)
def test_zero_size_states_with_absurd_dims_are_refused(explicit: bool) -> None:
    """A zero-size value spans no memory, but dims whose product is absurd abort the process where
    onnxruntime-extensions describes it to numpy: refused past 2**40 elements (the zero dims aside)."""
    session = open_session(KV, explicit)
    past = session.query_state()[0]
    before = past.state
    for shape in ([2**39, 2, 0, 4], [1, 2, 0, 4 * 2**39], [2**20, 2, 0, 2**20]):
        if shape[3] != 4:
            continue  # past is [?,2,?,4]
        with pytest.raises(ortstate.StateError, match=rf"cannot set state: shape \[{shape[0]}, 2, 0, 4\] spans more"):
            past.state = np.zeros(shape, np.float32)
        assert_same({"past": past.state}, {"past": before})
    with pytest.raises(ortstate.StateError, match="variable 'past': cannot set state: not an array"):
        past.state = [[1.0], [1.0, 2.0]]
    past.state = np.zeros([2**30, 2, 0, 4], np.float32)  # large but sane: kept
    assert past.state.shape == (2**30, 2, 0, 4)


def test_session_options_are_never_changed() -> None:
    """The same SessionOptions serve any number of sessions of any form, and plain ONNX Runtime
    sessions after them; what the caller set reaches every session."""
    custom = ortstate.convert(ACC)
    explicit = ortstate.convert(ACC, explicit_state=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = False
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    x = np.ones((1, 3), np.float32)
    for model, form in [(custom, "custom-op"), (custom, "custom-op"), (custom, "auto"), (explicit, "explicit")] * 2:
        session = ortstate.StatefulSession(model, options, form=form)
        session.run(None, {"x": x})
        assert session.run(None, {"x": x})[0].tolist() == [[2, 2, 2]]
        used = session.loaded.session.get_session_options()
        assert (used.intra_op_num_threads, used.log_severity_level, used.enable_cpu_mem_arena) == (1, 3, False)
        assert used.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    plain = ort.InferenceSession(explicit.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"x": x, "ortstate.in.acc": x, "ortstate.init.acc": np.array(False)}
    assert plain.run(None, feeds)[0].tolist() == [[2, 2, 2]]
    from ortstate.runtime.options import copy_session_options

    copy = copy_session_options(options)
    assert copy is not options and copy.intra_op_num_threads == 1


@pytest.mark.parametrize(("domain", "said"), [("com.microsoft", "does not know attribute"), ("", "cannot load")])
def test_a_contrib_op_attribute_this_onnxruntime_lacks_asks_for_a_newer_one(domain, said):
    """ONNX Runtime's schema check refuses an attribute it does not have: on a contrib op (what the
    converter writes, e.g. GroupQueryAttention's causal, which onnxruntime 1.23 lacks) the error says
    to upgrade onnxruntime; on a standard op the model is broken, and the error says so as before."""
    op = "FusedMatMul" if domain else "MatMul"
    node = onnx.helper.make_node(op, ["a", "b"], ["y"], domain=domain or None, future_knob=1)
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 2]) for n in "ab"],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2])],
    )
    opsets = [onnx.helper.make_opsetid("", 21), onnx.helper.make_opsetid("com.microsoft", 1)]
    model = onnx.helper.make_model(graph, opset_imports=opsets, ir_version=10)
    with pytest.raises(ortstate.OrtStateError, match=said) as info:
        ortstate.StatefulSession(model)
    if domain:
        assert f"onnxruntime {ort.__version__} does not know attribute 'future_knob' of operator {op}" in str(
            info.value
        )
        assert "newer onnxruntime" in str(info.value) and "\n" not in str(info.value)

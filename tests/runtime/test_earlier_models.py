"""Models and snapshots an earlier ortstate wrote still load and run (``tests/data/earlier_f16``: the
IR, its two conversions and a snapshot, from before the explicit form came from one pass; that
explicit model carries the f16 variable ``acc`` as float16, today's as float32)."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from oracle import REPO, assert_close, assert_same, ort_states, ov_request, ov_run, ov_states

import ortstate

EARLIER = REPO / "tests" / "data" / "earlier_f16"
RNG = np.random.default_rng(13)


@pytest.mark.parametrize(
    ("saved", "form"), [("custom.onnx", "custom-op"), ("custom.onnx", "auto"), ("explicit.onnx", "explicit")]
)
def test_earlier_model_resumes_from_its_snapshot_as_openvino_does(saved: str, form: str) -> None:
    session = ortstate.StatefulSession(EARLIER / saved, form=form)
    session.load_state(EARLIER / "state.npz")
    with np.load(EARLIER / "state.npz") as snapshot:
        saved_states = {"cross": snapshot["v0"], "count": snapshot["v1"], "acc": snapshot["v2"]}
    assert_same(ort_states(session), saved_states)
    request = ov_request(EARLIER / "model.xml")
    for state in request.query_state():  # the CPU plugin keeps i64 variables as i32, and is set so
        value = saved_states[state.name]
        state.state = ov.Tensor(value.astype(np.int32) if value.dtype == np.int64 else value)
    names = [o.get_any_name() for o in request.model_outputs]
    for step in range(3):
        feeds = {
            "x": RNG.standard_normal((1, 3)).astype(np.float16),
            "enc": RNG.standard_normal((1, 4)).astype(np.float32),
        }
        for name, got, want in zip(names, session.run(None, feeds), ov_run(request, feeds)):
            assert_close(got, want, f"step {step} output {name}", rtol=1e-3, atol=1e-3)
    want_states = ov_states(request)
    got_states = ort_states(session)
    assert sorted(got_states) == sorted(want_states)
    for name, want in want_states.items():
        assert_close(got_states[name], want, f"variable {name}", rtol=1e-3, atol=1e-3)

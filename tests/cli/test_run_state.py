"""A state the IR gives no initial value for a dynamic batch (LowLatency2/MakeStateful's zero
states of ``models/lstm_2l_dynbatch``): the first step's error says so and how to give one, in both
forms; ``ortstate run --state NAME=FILE.npy`` gives it, and the outputs are a session's that was
given the same values."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import REPO, run_cli

import ortstate
from ortstate.errors import RunError

MODEL = REPO / "models" / "lstm_2l_dynbatch" / "model.xml"
HINT = (
    "the model's variables 'h_inh_out' [2, 0, 16], 'c_inc_out' [2, 0, 16] start empty (the IR gives a dynamic dim "
    "of theirs no size): set each one's value before the first step (query_state() and its .state, or "
    "load_state(FILE.npz); ortstate run --state NAME=FILE.npy)"
)


@pytest.mark.parametrize("form", ["explicit", "custom-op"])
def test_the_first_step_says_the_state_needs_a_value(form):
    session = ortstate.StatefulSession(MODEL, form=form)
    with pytest.raises(RunError) as info:
        session.run(None, {"x": np.ones((1, 1, 8), np.float32)})
    assert str(info.value).endswith(HINT)
    for var in session.query_state():  # given one, it runs
        var.state = np.zeros((2, 1, 16), np.float32)
    assert session.run(None, {"x": np.ones((1, 1, 8), np.float32)})[0].shape == (1, 1, 16)


def test_run_takes_the_states_to_start_from(capsys, tmp_path):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(1, 1, 8)).astype(np.float32)
    h, c = (rng.normal(size=(2, 1, 16)).astype(np.float32) for _ in range(2))
    for name, value in {"x": x, "h": h, "c": c}.items():
        np.save(tmp_path / f"{name}.npy", value)
    code, out, err = run_cli(
        capsys, "run", MODEL, "--input", f"x={tmp_path / 'x.npy'}", "--steps", "2", "-o", tmp_path / "out",
        "--state", f"h_inh_out={tmp_path / 'h.npy'}", "--state", f"c_inc_out={tmp_path / 'c.npy'}",
    )  # fmt: skip
    assert code == 0, err
    lone = ortstate.StatefulSession(MODEL)
    states = {v.name: v for v in lone.query_state()}
    states["h_inh_out"].state, states["c_inc_out"].state = h, c
    for step in (1, 2):
        np.testing.assert_allclose(np.load(tmp_path / "out" / f"step{step}_y.npy"), lone.run(None, {"x": x})[0])


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ("h={npy}", "--state h: no such variable (the model's: c_inc_out, h_inh_out)"),
        (
            "h_inh_out={npy}",
            "--state h_inh_out: variable 'h_in' -> 'h_out': cannot set state: shape [1, 1, 8], expected",
        ),
    ],
)
def test_a_bad_state_is_named(capsys, tmp_path, state, message):
    np.save(tmp_path / "x.npy", np.ones((1, 1, 8), np.float32))
    npy = tmp_path / "x.npy"
    code, _, err = run_cli(capsys, "run", MODEL, "--input", f"x={npy}", "--state", state.format(npy=npy))
    assert code == 2
    assert err.startswith(f"ortstate: error: {message}") and err.count("\n") == 1

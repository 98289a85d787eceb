"""A custom-op model rewritten into the explicit form on load (``StatefulSession``'s default) computes
exactly what its Python state ops compute: every model of the repository, outputs and variables
bit for bit, step after step, through a reset and a state set from outside.

The Python state ops themselves are compared with OpenVINO by the oracle tests; so is the
rewritten form on the recurrent models and the KV cache (their ``rewritten`` cases).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from oracle import REPO

import ortstate
from ortstate.generate import Generator, find_model_files, read_config
from ortstate.timing.workloads import model_workload

ROOT = REPO
# lstm_2l_dynbatch can't run before its states are set (see models/README.md); test_models_recurrent
# covers its rewritten form.
IRS = [p for p in sorted((ROOT / "models").glob("*/model.xml")) if p.parent.name != "lstm_2l_dynbatch"]
IRS += [ROOT / "ortstate" / "_demo" / "char_lstm.xml"]
LLMS = sorted(d for d in (ROOT / "models" / "llm").iterdir() if (d / "reference.json").is_file())


def _states(session: ortstate.StatefulSession) -> dict[str, np.ndarray]:
    return {v.name: v.state for v in session.query_state()}


def _assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray], where: str) -> None:
    assert got.keys() == want.keys(), where
    for name in want:
        assert got[name].dtype == want[name].dtype, f"{where}: {name} dtype"
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{where}: {name}")


@pytest.mark.parametrize("xml", IRS, ids=[p.parent.name for p in IRS])
def test_rewritten_model_equals_its_python_state_ops(xml: Path) -> None:
    model = ortstate.convert(xml)
    pyops = ortstate.StatefulSession(model, form="custom-op")
    rewritten = ortstate.StatefulSession(model)
    assert (pyops.form, rewritten.form, rewritten.model_form) == ("custom-op", "explicit", "custom-op")
    assert [(i.name, i.type, i.shape) for i in rewritten.get_inputs()] == [
        (i.name, i.type, i.shape) for i in pyops.get_inputs()
    ]
    assert [o.name for o in rewritten.get_outputs()] == [o.name for o in pyops.get_outputs()]
    assert rewritten.variables == pyops.variables

    work = model_workload(xml, steps=3, position=4)
    first: dict[str, np.ndarray] = {}
    for round_ in range(2):
        for session in (pyops, rewritten):
            session.reset_state()
        if round_:  # the second round starts from a state set from outside (a first value + 1)
            for session in (pyops, rewritten):
                for var in session.query_state():
                    if var.state.size and var.state.dtype.kind == "f":
                        var.state = first[var.name] + 1
        for index, feeds in enumerate(work.prefill + work.steps):
            where = f"round {round_} step {index}"
            want = pyops.run(None, feeds)
            got = rewritten.run(None, feeds)
            names = [o.name for o in pyops.get_outputs()]
            _assert_same(dict(zip(names, got)), dict(zip(names, want)), where)
            _assert_same(_states(rewritten), _states(pyops), where)
            if round_ == 0 and index == 0:
                first = _states(pyops)


@pytest.mark.parametrize("folder", LLMS, ids=[d.name for d in LLMS])
def test_rewritten_decoder_generates_like_its_python_state_ops(folder: Path) -> None:
    """Greedy generation from the reference prompt (prefill, then decode), logits and caches."""
    ref = json.loads((folder / "reference.json").read_text())
    encoder_input = np.load(folder / ref["encoder"]["input_file"]) if ref["encoder"] else None
    pyops = Generator.from_dir(folder, form="custom-op")
    model = ortstate.convert(find_model_files(folder).decoder)
    rewritten = Generator(
        ortstate.StatefulSession(model), read_config(folder), encoder=pyops.encoder, embedder=pyops.embedder
    )
    assert (pyops.session.form, rewritten.session.form) == ("custom-op", "explicit")
    for round_ in range(2):  # the second after a reset
        runs = []
        for generator in (pyops, rewritten):
            generator.reset()
            tokens = generator.generate_batch(
                ref["prompt_ids"], 4, encoder_input=encoder_input, stop_at_eos=False, keep_logits=True
            )
            assert generator.last_run is not None
            runs.append((tokens, generator.last_run.logits, _states(generator.session)))
        (want_tokens, want_logits, want_states), (tokens, logits, states) = runs
        assert tokens == want_tokens, f"round {round_}"
        np.testing.assert_array_equal(logits, want_logits, err_msg=f"round {round_}")
        _assert_same(states, want_states, f"round {round_}")

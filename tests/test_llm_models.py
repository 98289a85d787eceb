"""Every committed optimum-intel LLM (``models/llm/*``) generates OpenVINO's reference through ortstate.

For each folder and both ONNX forms: ``Generator.from_dir`` converts the IRs once; greedy decoding
from the reference prompt must give exactly the reference tokens, the logits of every step must be
within 1e-3 of ``logits.npy``, and every variable after the last step within 1e-3 of ``states.npz``
(named by OpenVINO's variable id). After ``reset()`` the variables read their initial value again
and a second generation repeats the first (the init subgraphs, e.g. Whisper's cross-attention K/V
computed from the encoder output, must run again). Nothing is skipped: a folder that cannot be
converted or run yet fails with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ortstate.generate import Generator

LLM_DIR = Path(__file__).resolve().parents[1] / "models" / "llm"
FOLDERS = sorted(p.parent for p in LLM_DIR.glob("*/reference.json"))
FORMS = ("custom-op", "explicit")
CASES = [(folder, form) for folder in FOLDERS for form in FORMS]
ATOL = 1e-3


@dataclass(repr=False)
class Case:
    folder: Path
    form: str
    ref: dict
    generator: Generator
    tokens: list[list[int]]
    logits: np.ndarray
    states: dict[str, np.ndarray]

    def __repr__(self) -> str:  # pytest shows it on failure: keep the arrays out
        return f"Case({self.folder.name}, {self.form})"


def _encoder_input(folder: Path, ref: dict) -> np.ndarray | None:
    return np.load(folder / ref["encoder"]["input_file"]) if ref["encoder"] else None


@pytest.fixture(scope="module", params=CASES, ids=[f"{f.name}-{form}" for f, form in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    """Convert once per folder and form, and generate the reference's length from its prompt."""
    folder, form = request.param
    ref = json.loads((folder / "reference.json").read_text())
    generator = Generator.from_dir(folder, form=form)
    assert generator.session.form == form
    tokens = generator.generate_batch(
        ref["prompt_ids"],
        len(ref["new_tokens"][0]),
        encoder_input=_encoder_input(folder, ref),
        stop_at_eos=False,
        keep_logits=True,
    )
    run = generator.last_run
    assert run is not None and run.logits is not None
    states = {s.name: s.state for s in generator.session.query_state()}
    return Case(folder, form, ref, generator, tokens, run.logits, states)


def test_llm_folders_found() -> None:
    assert len(FOLDERS) >= 20, f"expected the committed LLM folders under {LLM_DIR}, found {len(FOLDERS)}"


def test_tokens_equal_reference(case: Case) -> None:
    assert case.tokens == case.ref["new_tokens"]


def test_encoder_output_matches(case: Case) -> None:
    """Encoder-decoders only (Whisper, T5): the converted encoder reproduces ``encoder_output.npy``."""
    if not case.ref["encoder"]:
        assert case.generator.encoder is None
        return
    hidden = case.generator.encoder_output
    assert hidden is not None
    expected = np.load(case.folder / case.ref["encoder"]["output_file"]).astype(np.float32)
    np.testing.assert_allclose(hidden, expected, atol=ATOL, rtol=0)


def test_logits_match_every_step(case: Case) -> None:
    expected = np.load(case.folder / case.ref["logits_file"])
    assert case.logits.shape == expected.shape
    diff = np.abs(case.logits - expected).max(axis=(1, 2))
    bad = [f"step {k}: {d:.2e}" for k, d in enumerate(diff) if not d <= ATOL]
    assert not bad, f"logits differ from OpenVINO by more than {ATOL}: {', '.join(bad)}"


def test_states_match_after_last_step(case: Case) -> None:
    stored = np.load(case.folder / case.ref["states_file"])
    assert sorted(case.states) == sorted(stored.files)
    for name, value in case.states.items():
        expected = stored[name]
        assert value.shape == expected.shape, name
        # Whisper's big cross-attention states are stored rounded to f16
        rtol = 1e-3 if expected.dtype == np.float16 else 0
        np.testing.assert_allclose(value, expected.astype(np.float32), atol=ATOL, rtol=rtol, err_msg=name)


def test_reset_then_generate_again(case: Case) -> None:
    generator = case.generator
    generator.reset()
    assert generator.past_tokens == 0
    for state in generator.session.query_state():
        value = state.state
        assert not np.any(value), f"{state.name}: not back to its initial value after reset()"
    again = generator.generate_batch(
        case.ref["prompt_ids"], len(case.ref["new_tokens"][0]), stop_at_eos=False, keep_logits=True
    )
    assert again == case.tokens
    assert generator.last_run is not None and generator.last_run.logits is not None
    np.testing.assert_allclose(generator.last_run.logits, case.logits, atol=1e-5, rtol=0)

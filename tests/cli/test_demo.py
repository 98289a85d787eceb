"""``ortstate demo``: the packaged char-LSTM IR streams Zen text and agrees with OpenVINO."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from oracle import OV_CONFIG

import ortstate
from ortstate.cli import char_lstm, cmd_demo, main

CHARS = 60


def _openvino_greedy(prompt: str, count: int) -> str:
    """Greedy decoding straight through OpenVINO's stateful InferRequest, independent of the demo."""
    meta = json.loads((char_lstm.DEMO_DIR / "vocab.json").read_text(encoding="utf-8"))
    chars, name, out = meta["chars"], meta["input"]["name"], meta["output"]["name"]
    xml = char_lstm.DEMO_DIR / "char_lstm.xml"
    request = ov.Core().compile_model(str(xml), "CPU", OV_CONFIG).create_infer_request()
    logits = None
    for ch in prompt:
        logits = request.infer({name: np.array([[chars.index(ch)]], np.int64)})[out]
    text = ""
    for _ in range(count):
        nxt = int(np.argmax(logits))
        text += chars[nxt]
        logits = request.infer({name: np.array([[nxt]], np.int64)})[out]
    return text


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["demo", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_vocab_describes_the_ir() -> None:
    meta = json.loads((char_lstm.DEMO_DIR / "vocab.json").read_text(encoding="utf-8"))
    model = ov.Core().read_model(str(char_lstm.DEMO_DIR / "char_lstm.xml"))
    assert [i.get_any_name() for i in model.inputs] == [meta["input"]["name"]]
    assert str(model.inputs[0].get_partial_shape()) == meta["input"]["shape"]
    assert model.inputs[0].get_element_type() == ov.Type.i64
    assert [o.get_any_name() for o in model.outputs] == [meta["output"]["name"]]
    assert model.outputs[0].get_partial_shape()[-1].get_length() == len(meta["chars"])
    assert sorted(s.get_variable_id() for s in model.get_sinks()) == sorted(meta["variables"])
    assert (char_lstm.DEMO_DIR / "char_lstm.bin").stat().st_size < 1 << 20


@pytest.mark.parametrize("form", [[], ["--form", "custom-op"]], ids=["auto", "custom-op"])
def test_demo_streams_zen_and_matches_openvino(capsys: pytest.CaptureFixture[str], form: list[str]) -> None:
    code, out, err = _run(capsys, "--chars", str(CHARS), *form)
    assert code == 0, err
    assert out.startswith("Beautiful is better than ugly.\nExplicit is better than implicit.\n"), out
    assert "same prompt again: same text" in err
    assert "different text" in err
    assert "OpenVINO (stateful InferRequest, CPU f32): the same" in err
    assert "max |logit difference|" in err
    assert f"ortstate ({'custom-op' if form else 'explicit'}): " in err and "median" in err and "p90" in err


def test_greedy_text_is_deterministic_and_equals_openvino(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--chars", str(CHARS), "--no-openvino")
    assert code == 0
    again = _run(capsys, "--chars", str(CHARS), "--no-openvino")[1]
    assert out == again
    prompt, second = "Beautiful is", cmd_demo.SECOND_PROMPT
    want = f"{prompt}{_openvino_greedy(prompt, CHARS)}\n{second}{_openvino_greedy(second, CHARS)}\n"
    assert out == want


def test_no_openvino_skips_the_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--chars", "10", "--no-openvino", "--prompt", "Now is")
    assert code == 0
    assert out.startswith("Now is")
    assert "OpenVINO" not in err


def test_sampling_with_a_seed_is_reproducible(capsys: pytest.CaptureFixture[str]) -> None:
    first = _run(capsys, "--chars", "40", "--seed", "3")
    second = _run(capsys, "--chars", "40", "--seed", "3")
    assert first[0] == 0 and first[1] == second[1]
    assert "sampling, seed 3" in first[2]
    assert "OpenVINO (stateful InferRequest, CPU f32): the same" in first[2]


def test_unknown_prompt_characters(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--prompt", "Zen ☯")
    assert code == 2
    assert out == ""
    assert err == "ortstate: error: --prompt: characters not in the demo's vocabulary: '☯'\n"
    code, out, err = _run(capsys, "--chars", "0")
    assert (code, out, err) == (2, "", "ortstate: error: --chars must be at least 1, got 0\n")


def test_demo_files_are_packaged() -> None:
    assert char_lstm.DEMO_DIR == Path(ortstate.__file__).parent / "_demo"  # package data
    assert {p.name for p in char_lstm.DEMO_DIR.iterdir()} >= {"char_lstm.xml", "char_lstm.bin", "vocab.json"}


def test_cli_runs_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--chars", "30", "--no-openvino"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("Beautiful is better than ugly.")
    assert "reset_state(), same prompt again: same text" in captured.err
    assert main(["demo", "--chars", "0"]) == 2

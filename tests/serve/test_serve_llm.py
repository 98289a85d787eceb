"""ortstate serve and an LLM with KV caches: refused in one line that says what to use instead."""

from __future__ import annotations

from pathlib import Path

from oracle import assert_one_line_error, run_cli

LLAMA = str(Path(__file__).resolve().parents[2] / "models" / "llm" / "llama" / "openvino_model.xml")


def test_an_llm_is_refused_with_what_to_use_instead(capsys):
    code, out, err = run_cli(capsys, "serve", LLAMA, "--port", "0")
    assert code == 2 and out == ""
    assert_one_line_error(
        err,
        f"{LLAMA}: an LLM with KV caches: ortstate serve streams models whose state has a fixed size per stream "
        "(recurrent and SSM models); generate for many LLM streams at once in Python with "
        "ortstate.generate.ContinuousBatcher (docs/streams.md)",
    )

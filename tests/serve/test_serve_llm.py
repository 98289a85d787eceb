"""ortstate serve and an LLM IR with KV caches: refused in one line that says to serve its folder (OpenAI API)."""

from __future__ import annotations

from pathlib import Path

from oracle import assert_one_line_error, run_cli

LLAMA = str(Path(__file__).resolve().parents[2] / "models" / "llm" / "llama" / "openvino_model.xml")


def test_an_llm_is_refused_with_what_to_use_instead(capsys):
    code, out, err = run_cli(capsys, "serve", LLAMA, "--port", "0")
    assert code == 2 and out == ""
    assert_one_line_error(
        err,
        f"{LLAMA}: an LLM with KV caches: serve its optimum-intel folder with the OpenAI API "
        f"(ortstate serve {Path(LLAMA).parent}; docs/serve.md)",
    )

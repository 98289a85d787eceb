"""ortstate serve and an LLM IR with KV caches: refused in one line that says to serve its folder (OpenAI API);
--durable refuses KV caches (its log could not hold a cache per step), for an IR or a folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle import assert_one_line_error, run_cli

from ortstate import StreamPool
from ortstate.errors import ServeError
from ortstate.serve.streams.service import StreamService

LLAMA = str(Path(__file__).resolve().parents[2] / "models" / "llm" / "llama" / "openvino_model.xml")


def test_an_llm_is_refused_with_what_to_use_instead(capsys):
    code, out, err = run_cli(capsys, "serve", LLAMA, "--port", "0")
    assert code == 2 and out == ""
    assert_one_line_error(
        err,
        f"{LLAMA}: an LLM with KV caches: serve its optimum-intel folder with the OpenAI API "
        f"(ortstate serve {Path(LLAMA).parent}; docs/serve-llm.md)",
    )


def test_durable_refuses_kv_caches_in_one_line(tmp_path):
    """A KV cache grows with every token: logging it whole per step is refused, naming why."""
    pool = StreamPool(LLAMA, slots=2, kv_cache_bytes=1 << 24, max_context=64)
    with pytest.raises(
        ServeError, match=r"^--durable logs each stream's whole state at every step; this model keeps KV"
    ):
        StreamService(pool, tmp_path, durable=True)
    assert list(tmp_path.iterdir()) == []


def test_durable_refuses_an_llm_folder_in_one_line(capsys, tmp_path):
    code, out, err = run_cli(capsys, "serve", str(Path(LLAMA).parent), "--state-dir", str(tmp_path), "--durable")
    assert code == 2 and out == ""
    assert_one_line_error(
        err,
        "--durable logs each stream's whole state at every step, and an LLM's KV cache grows with every token: an "
        "LLM folder is served without it (with --state-dir, conversations are parked at a clean stop)",
    )

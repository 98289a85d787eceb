"""ortstate serve and an LLM with KV caches: refused in one line that says what to use instead (and by
--durable, whose log could not hold a cache per step)."""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle import assert_one_line_error, run_cli

from ortstate import StreamPool
from ortstate.errors import ServeError
from ortstate.serve.service import StreamService

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


def test_durable_refuses_kv_caches_in_one_line(tmp_path):
    """A KV cache grows with every token: logging it whole per step is refused, naming why."""
    pool = StreamPool(LLAMA, slots=2, kv_cache_bytes=1 << 24, max_context=64)
    with pytest.raises(
        ServeError, match=r"^--durable logs each stream's whole state at every step; this model keeps KV"
    ):
        StreamService(pool, tmp_path, durable=True)
    assert not (tmp_path / "journal").exists()

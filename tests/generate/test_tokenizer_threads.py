"""``Tokenizer.encode`` lets go of the GIL while ``tokenizers`` works: a long text tokenized in one
thread does not stop another (a server's event loop) for the whole of it."""

from __future__ import annotations

import sys
import threading

import pytest
from oracle import REPO

pytest.importorskip("tokenizers")

from ortstate.generate import Tokenizer  # noqa: E402


def test_another_thread_runs_while_a_text_is_tokenized() -> None:
    """With the switch interval longer than the test, a thread holding the GIL keeps it until it
    blocks or lets go: the other thread, woken just before ``encode``, runs during it only if
    ``encode`` lets go of the GIL (``tokenizers``' own ``encode`` never does)."""
    tokenizer = Tokenizer.from_dir(REPO / "models/llm/llama")
    text = "Stateful models run in ONNX Runtime. " * 20_000
    waiting, go, ran = threading.Event(), threading.Event(), threading.Event()

    def other() -> None:
        waiting.set()
        go.wait()
        ran.set()

    thread = threading.Thread(target=other)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        thread.start()
        assert waiting.wait(10)  # blocked in go.wait(): it needs the GIL again to go on
        go.set()
        ids = tokenizer.encode(text)
        ran_during = ran.is_set()
    finally:
        sys.setswitchinterval(interval)
        go.set()
        thread.join(10)
    assert ran_during
    assert ids == list(tokenizer.backend.encode(text).ids)

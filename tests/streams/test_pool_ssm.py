"""StreamPool on SSM language models (the optimum-intel mamba exports): greedy generation of
several streams batched gives each stream what it gives alone in a StatefulSession fed the same,
and a stream's ``beam_idx`` indexes its own row only."""

from __future__ import annotations

import json

import numpy as np
import pytest
from oracle import REPO

import ortstate

RTOL, ATOL = 1e-6, 1e-6
SSM = ["mamba", "falcon_mamba"]


def _ir(name: str):
    return REPO / "models" / "llm" / name / "openvino_model.xml"


def _feeds(tokens: list[int], past: int, kernel: int, beam: int = 0) -> dict[str, np.ndarray]:
    """A mamba step as ortstate's decoders feed it (:mod:`ortstate.decoders.feeds`): the tokens,
    their part of the mask, ``cache_position`` ``arange(kernel)`` at prefill and ``[past]`` after."""
    n = len(tokens)
    position = np.arange(kernel) if past == 0 else np.array([past])
    return {
        "input_ids": np.array([tokens], np.int64),
        "attention_mask": np.ones((1, n), np.int64),
        "cache_position": position.astype(np.int64),
        "beam_idx": np.array([beam], np.int32),
    }


def _close(got: dict, want: dict, what: str) -> None:
    assert got.keys() == want.keys(), what
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=f"{what}: {name}")


@pytest.mark.parametrize("name", SSM)
def test_greedy_streams_batched_equal_lone_sessions(name: str) -> None:
    kernel = json.loads((_ir(name).parent / "config.json").read_text())["conv_kernel"]
    pool = ortstate.StreamPool(_ir(name), slots=4)
    assert {s.name: (s.axis, s.rows) for s in pool.layout.inputs} == {
        "input_ids": (0, False),
        "attention_mask": (0, False),
        "cache_position": (None, False),  # steers the run: the streams of one run share it
        "beam_idx": (0, True),  # indexes the batch's rows: offset to each stream's own
    }
    session = ortstate.StatefulSession(_ir(name))
    rng = np.random.default_rng(20)
    lone, past, last = {}, {}, {}
    for _ in range(3):
        sid = pool.open()
        lone[sid], past[sid] = session.create_infer_request(), 0
    for tick in range(14):
        stepping = [s for s in pool.streams if rng.random() < 0.8]
        if tick == 7:  # a reset: the stream prefills again, alone it starts empty again
            pool.reset(stepping[0])
            lone[stepping[0]].reset_state()
            past[stepping[0]] = 0
        feeds = {}
        for sid in stepping:
            # prompts of 1 or 3: a decode step's cache_position below the conv window steers it
            prompt = [int(t) for t in rng.integers(3, 200, int(rng.choice([1, 3])))]
            tokens = prompt if past[sid] == 0 else [last[sid]]
            feeds[sid] = _feeds(tokens, past[sid], kernel)
        got = pool.step(feeds)
        for sid in stepping:
            want = lone[sid].infer(feeds[sid])
            _close(got[sid], want, f"{name} tick {tick} stream {sid}")
            last[sid] = int(np.argmax(want["logits"][0, -1]))
            assert int(np.argmax(got[sid]["logits"][0, -1])) == last[sid]
            past[sid] += feeds[sid]["input_ids"].shape[1]
    assert pool.stats().max_batch > 1


def test_a_streams_row_index_reaches_its_own_row_only() -> None:
    """beam_idx [0] (or -1) reads the stream's own state; out of range reads zeros, as alone:
    never another stream's row, though a batch of three has rows 1 and 2."""
    ir = _ir("mamba")
    pool = ortstate.StreamPool(ir, slots=3)
    session = ortstate.StatefulSession(ir)
    sids = [pool.open() for _ in range(3)]
    lone = {sid: session.create_infer_request() for sid in sids}
    prompts = {sid: [5 + 40 * k, 7, 9 + k] for k, sid in enumerate(sids)}
    feeds = {sid: _feeds(prompts[sid], 0, 4) for sid in sids}
    pool.step(feeds)
    for sid in sids:
        lone[sid].infer(feeds[sid])
    for beam in ([0, -1, 1], [2, 0, -1]):
        feeds = {sid: _feeds([11], 3, 4, b) for sid, b in zip(sids, beam)}
        got = pool.step(feeds)
        for sid in sids:
            _close(got[sid], lone[sid].infer(feeds[sid]), f"beam_idx {feeds[sid]['beam_idx']}")
    assert pool.stats().max_batch == 3

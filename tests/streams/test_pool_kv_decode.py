"""KvPool.decode: one-token steps of many streams given as one batch (streams/kv_batch.py), each
stream against a lone StatefulSession fed its own row (logits within 1e-4, argmax equal): streams
in any order, with holes between their rows, preempted ones brought back, on a model that batches
ragged rows (one run) and on ones that do not (the batch split and stepped); bad batches refused
with nothing changed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ortstate
from ortstate.decoders import input_specs
from ortstate.decoders.feeds import FeedRules
from ortstate.decoders.model_dir import find_model_files, read_config
from ortstate.errors import RunError, StateError

MODELS = Path(__file__).resolve().parents[2] / "models" / "llm"
# ragged (one run), uniform (split per cache length), a mask of the current token only (zamba2)
NAMES = ["llama", "gemma2", "lfm2", "zamba2"]


def _setup(name: str, slots: int = 8, **kwargs):
    files = find_model_files(MODELS / name)
    model = ortstate.convert(str(files.decoder), explicit_state=True)
    pool = ortstate.StreamPool(model, slots, max_context=40, **kwargs)
    rules = FeedRules.for_model(input_specs(ortstate.StatefulSession(model).get_inputs()), read_config(files.folder))
    return model, pool, rules


def _batch(rules: FeedRules, tokens: list[int], pasts: list[int]) -> dict[str, np.ndarray]:
    """The rows' feeds as the engine batches them: masks left-padded, positions from the mask."""
    past = np.array(pasts)
    width = int(past.max()) + 1
    mask = (np.arange(width)[None, :] >= (width - 1 - past)[:, None]).astype(np.int64)
    return rules.feeds(np.array(tokens, np.int64)[:, None], width - 1, mask=mask)


@pytest.mark.parametrize("name", NAMES)
def test_a_batch_gives_each_stream_what_a_lone_session_gives(name: str) -> None:
    model, pool, rules = _setup(name)
    rng = np.random.default_rng(sum(map(ord, name)))
    sessions: dict[int, ortstate.StatefulSession] = {}
    pasts: dict[int, int] = {}
    for n in (3, 7, 2, 9, 5, 4):
        sid = pool.open()
        sessions[sid] = ortstate.StatefulSession(model)
        feeds = rules.feeds(rng.integers(0, 200, (1, n)), 0)
        pool.step({sid: feeds})
        sessions[sid].run(None, feeds)
        pasts[sid] = n
    pool.close(2)  # a free row inside the block
    del sessions[2], pasts[2]
    for round_ in range(6):
        sids = [int(s) for s in rng.permutation(list(sessions)) if rng.random() < 0.8] or [0]  # any order, holes
        tokens = [int(t) for t in rng.integers(0, 200, len(sids))]
        last = round_ % 2 == 1
        got = pool.decode(sids, _batch(rules, tokens, [pasts[s] for s in sids]), logits="last" if last else "all")
        assert got["logits"].shape[0] == len(sids)
        for i, sid in enumerate(sids):
            want = sessions[sid].run(None, rules.feeds(np.array([[tokens[i]]]), pasts[sid]))[0]
            where = f"{name} round {round_} stream {sid}"
            np.testing.assert_allclose(got["logits"][i : i + 1], want, rtol=1e-4, atol=1e-4, err_msg=where)
            assert got["logits"][i, -1].argmax() == want[0, -1].argmax(), where
            pasts[sid] += 1
            assert pool.length(sid) == pasts[sid]


def test_a_ragged_batch_is_one_run_and_preempted_streams_come_back() -> None:
    model, pool, rules = _setup("llama")
    assert pool.batching == "ragged"
    sids = [pool.open() for _ in range(4)]
    sessions = [ortstate.StatefulSession(model) for _ in sids]
    for k, (sid, session) in enumerate(zip(sids, sessions)):
        feeds = rules.feeds(np.arange(2 + 3 * k)[None] + 5, 0)
        pool.step({sid: feeds})
        session.run(None, feeds)
    runs = pool.stats().runs
    pool_out = pool.decode(sids[::-1], _batch(rules, [1, 2, 3, 4], [11, 8, 5, 2]))
    assert pool.stats().runs == runs + 1
    for i, (session, past) in enumerate(zip(sessions[::-1], [11, 8, 5, 2])):
        want = session.run(None, rules.feeds(np.array([[i + 1]]), past))[0]
        np.testing.assert_allclose(pool_out["logits"][i : i + 1], want, rtol=1e-4, atol=1e-4)
    # a pool whose budget holds two streams: stepping the other two preempts, then brings them back
    small = ortstate.StreamPool(model, 4, max_context=40, kv_cache_bytes=pool.token_bytes * 41)
    a, b = small.open(), small.open()
    lone = [ortstate.StatefulSession(model) for _ in range(2)]
    for sid, session, n in ((a, lone[0], 12), (b, lone[1], 9)):
        feeds = rules.feeds(np.arange(n)[None] + 3, 0)
        small.step({sid: feeds})
        session.run(None, feeds)
    c = small.open()
    small.step({c: rules.feeds(np.arange(25)[None], 0)})  # a is moved out of the arena
    assert small.stats().preempted >= 1
    got = small.decode([b, a], _batch(rules, [7, 8], [9, 12]))
    for i, (session, token, past) in enumerate(((lone[1], 7, 9), (lone[0], 8, 12))):
        want = session.run(None, rules.feeds(np.array([[token]]), past))[0]
        np.testing.assert_allclose(got["logits"][i : i + 1], want, rtol=1e-4, atol=1e-4)
    assert (small.length(a), small.length(b)) == (13, 10)


def test_a_bad_batch_is_refused_and_changes_nothing() -> None:
    _, pool, rules = _setup("llama", max_batch=None)
    a, b = pool.open(), pool.open()
    pool.step({a: rules.feeds(np.array([[1, 2, 3]]), 0), b: rules.feeds(np.array([[4]]), 0)})
    good = _batch(rules, [5, 6], [3, 1])
    with pytest.raises(RunError, match=r"decode takes distinct open streams, got \[0, 0\]"):
        pool.decode([a, a], good)
    with pytest.raises(StateError, match="stream 7 is not open"):
        pool.decode([a, 7], good)
    with pytest.raises(RunError, match=r"streams 0, 1: input 'input_ids' has shape \[3, 1\]; the batch's has rank 2"):
        pool.decode([a, b], _batch(rules, [5, 6, 7], [3, 1, 1]))
    with pytest.raises(RunError, match="streams 0, 1: attention_mask has 3 columns; the streams' pasts and tokens"):
        pool.decode([a, b], {**good, "attention_mask": np.ones((2, 3), np.int64)})
    with pytest.raises(RunError, match="streams 0, 1: input 'position_ids' must be int64, got int32"):
        pool.decode([a, b], {**good, "position_ids": good["position_ids"].astype(np.int32)})
    with pytest.raises(RunError, match="input 'input_ids' has 2 positions: one token a stream"):
        pool.decode([a, b], {**good, "input_ids": np.ones((2, 2), np.int64)})
    with pytest.raises(RunError, match="streams 0, 1: missing input"):
        pool.decode([a, b], {k: v for k, v in good.items() if k != "beam_idx"})
    assert (pool.length(a), pool.length(b)) == (3, 1)
    full = pool.open()
    pool.step({full: rules.feeds(np.arange(40)[None] % 200, 0)})
    with pytest.raises(RunError, match="stream 2: 40 \\+ 1 positions are over the pool's max_context of 40"):
        pool.decode([a, full], _batch(rules, [1, 2], [3, 40]))
    assert (pool.length(a), pool.length(full)) == (3, 40)


@pytest.mark.parametrize("name", ["llama", "gemma2"])  # one ragged run; a batch split into runs
def test_before_run_is_called_once_just_before_the_first_run(name: str) -> None:
    _, pool, rules = _setup(name)
    a, b = pool.open(), pool.open()
    calls: list[int] = []

    def hook() -> None:
        calls.append(pool.stats().runs)  # the runs before it: none of this call's yet

    runs = pool.stats().runs
    # a prompt of 3 tokens and one of 1: one run each
    pool.step({a: rules.feeds(np.array([[1, 2, 3]]), 0), b: rules.feeds(np.array([[4]]), 0)}, before_run=hook)
    assert calls == [runs] and pool.stats().runs == runs + 2
    calls.clear()
    runs = pool.stats().runs
    pool.decode([a, b], _batch(rules, [5, 6], [3, 1]), before_run=hook)
    assert calls == [runs] and pool.stats().runs > runs
    calls.clear()
    with pytest.raises(RunError):  # refused before any run: not called, nothing ran
        pool.decode([a, b], _batch(rules, [5, 6, 7], [4, 2, 1]), before_run=hook)
    with pytest.raises(StateError):
        pool.step({9: rules.feeds(np.array([[1]]), 0)}, before_run=hook)
    assert calls == [] and (pool.length(a), pool.length(b)) == (4, 2)

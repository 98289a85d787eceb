"""StreamPool on the committed KV-cache decoders (KvPool): random interleavings of open, prompt,
decode, reset, close, park, save/load and preemption, each stream against a lone StatefulSession fed
the same feeds (logits within 1e-4, argmax equal), in both forms of file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from attention_models import Spec, token_decoder
from kv_models import one_layer
from oracle import save_ir

import ortstate
from ortstate.convert import read_attention_report
from ortstate.decoders import input_specs
from ortstate.decoders.feeds import FeedRules
from ortstate.decoders.model_dir import find_model_files, read_config
from ortstate.errors import OrtStateError, RunError, StateError
from ortstate.streams import KvPool

MODELS = Path(__file__).resolve().parents[2] / "models" / "llm"
# every decoder with a KV cache (encoder-decoders keep cross-attention caches of their own; mamba and
# falcon_mamba have no KV cache: the recurrent pool takes them, tests/streams/test_pool_ssm.py)
DECODERS = sorted(
    p.name for p in MODELS.iterdir() if p.is_dir() and p.name not in ("t5", "whisper", "mamba", "falcon_mamba", "llava")
)
RAGGED = {"llama", "llama_fp16", "llama_int4", "llama_int8", "gemma2", "mistral", "gpt2", "phi3", "qwen2", "qwen3",
          "mixtral", "dbrx", "gpt_oss", "xglm"}  # fmt: skip


def _converted(name: str, form: str):
    files = find_model_files(MODELS / name)
    return ortstate.convert(str(files.decoder), explicit_state=form == "explicit"), files


def _rules(session: ortstate.StatefulSession, folder: Path) -> FeedRules:
    return FeedRules.for_model(input_specs(session.get_inputs()), read_config(folder))


class _Shadow:
    """A stream of the pool and the lone session that must match it."""

    def __init__(self, sid: int, session: ortstate.StatefulSession) -> None:
        self.sid, self.session, self.past = sid, session, 0


def _check(got: dict, want: list[np.ndarray], where: str) -> None:
    logits = got["logits"]
    assert logits.shape == want[0].shape, where
    np.testing.assert_allclose(logits, want[0], rtol=1e-4, atol=1e-4, err_msg=where)
    assert logits[0, -1].argmax() == want[0][0, -1].argmax(), where


@pytest.mark.parametrize("form", ["custom-op", "explicit"])
@pytest.mark.parametrize("name", DECODERS)
def test_streams_match_lone_sessions(name: str, form: str, tmp_path: Path) -> None:
    model, files = _converted(name, form)
    pool = ortstate.StreamPool(model, 4, max_context=48, park_dir=tmp_path / "park")
    assert isinstance(pool, KvPool)
    assert pool.batching == ("ragged" if name in RAGGED else pool.batching)
    assert pool.batching in ("ragged", "uniform")  # every committed decoder batches
    # room for about two streams' caches: a third stepping preempts the least recently stepped one
    small = ortstate.StreamPool(model, 4, max_context=48, kv_cache_bytes=pool.token_bytes * 98)
    rng = np.random.default_rng(sum(map(ord, name + form)))
    for target in (pool, small):
        rules = None
        shadows: list[_Shadow] = []
        for round_ in range(26):
            action = (
                rng.choice(["open", "step", "step", "step", "reset", "close", "park", "save"]) if shadows else "open"
            )
            if action in ("open", "save") and len(shadows) >= 3:  # at most 3 streams: all fit when all step
                action = "step"
            if action == "open":
                session = ortstate.StatefulSession(model)
                rules = rules or _rules(session, files.folder)
                shadows.append(_Shadow(target.open(), session))
                continue
            s = shadows[rng.integers(len(shadows))]
            if action == "reset":
                target.reset(s.sid)
                s.session.reset_state()
                s.past = 0
            elif action == "close":
                target.close(s.sid)
                shadows.remove(s)
            elif action == "park" and target is pool:
                target.park(s.sid)
            elif action == "save":
                path = tmp_path / f"{form}-{round_}.npz"
                target.save(s.sid, path)
                session = ortstate.StatefulSession(model)
                session.load_state(path)  # the pool's snapshot is a lone session's
                shadows.append(_Shadow(target.load(path), session))
                shadows[-1].past = s.past
            else:  # a step of every stream, or of some: prompts and one-token steps in one pool step
                part = [x for x in shadows if rng.random() < 0.8] or shadows[:1]
                feeds = {}
                for x in part:
                    n = int(rng.integers(1, 12)) if x.past == 0 or rng.random() < 0.15 else 1
                    n = min(n, 32 - x.past)  # 3 streams of 32 positions: within the small pool's budget
                    if n <= 0:
                        target.reset(x.sid)
                        x.session.reset_state()
                        x.past, n = 0, 1
                    feeds[x.sid] = rules.feeds(rng.integers(0, 200, (1, n)), x.past)
                last = bool(rng.random() < 0.3)  # the last position's logits only: what a generator needs
                got = target.step(feeds, logits="last" if last else "all")
                for x in part:
                    want = x.session.run(None, feeds[x.sid])
                    want = [want[0][:, -1:]] if last else want
                    _check(got[x.sid], want, f"{name} {form} round {round_} stream {x.sid} logits {last}")
                    x.past += feeds[x.sid]["input_ids"].shape[1]
                    assert target.length(x.sid) == x.past
    stats = small.stats()
    assert stats.kv_cache_bytes == small.token_bytes * 98
    assert stats.steps > 0


@pytest.mark.parametrize("name", ["llama", "xglm"])  # caches in place (fused attention); copied (composed)
def test_a_batch_of_one_token_steps_is_one_run(name: str) -> None:
    model, files = _converted(name, "explicit")
    pool = ortstate.StreamPool(model, 8, max_context=64)
    session = ortstate.StatefulSession(model)
    rules = _rules(session, files.folder)
    sids = [pool.open() for _ in range(5)]
    for k, sid in enumerate(sids):  # caches of 2, 4, 6, 8, 10 positions
        pool.step({sid: rules.feeds(np.arange(2 + 2 * k)[None] + 3, 0)})
    runs = pool.stats().runs
    feeds = {sid: rules.feeds(np.array([[7]]), 2 + 2 * k) for k, sid in enumerate(sids)}
    got = pool.step(feeds)
    assert pool.stats().runs == runs + 1
    assert pool.stats().max_batch == 5
    session.run(None, rules.feeds(np.arange(8)[None] + 3, 0))  # the fourth stream, alone
    _check(got[sids[3]], session.run(None, feeds[sids[3]]), f"{name} stream {sids[3]}")


def test_a_model_that_rewrites_a_copied_cache_is_refused(tmp_path: Path) -> None:
    """A cache no fused attention appends to is copied in and out of its row: the pool keeps only the
    positions a step appends, so a model that changes the past it reads (here doubles it) is refused."""
    xml = one_layer(tmp_path, token_ids=True, scaled_past=True, batch_from_ids=True)
    with pytest.raises(OrtStateError, match="variable '[^']+': its next value is not its past with the step's 1 po"):
        ortstate.StreamPool(ortstate.convert(str(xml)), 2)
    plain = one_layer(tmp_path / "plain", token_ids=True, batch_from_ids=True)  # appends only: pooled
    assert ortstate.StreamPool(ortstate.convert(str(plain)), 2).batching == "ragged"


def test_a_failed_step_changes_no_stream() -> None:
    model, files = _converted("llama", "explicit")
    pool = ortstate.StreamPool(model, 4, max_context=16)
    rules = _rules(ortstate.StatefulSession(model), files.folder)
    sid = pool.open()
    pool.step({sid: rules.feeds(np.array([[1, 2, 3]]), 0)})
    with pytest.raises(RunError, match=r"stream 0: 3 \+ 14 positions are over the pool's max_context of 16"):
        pool.step({sid: rules.feeds(np.arange(14)[None], 3)})
    with pytest.raises(RunError, match="stream 0: input 'input_ids' must be int64, got float32"):
        pool.step({sid: {**rules.feeds(np.array([[1]]), 3), "input_ids": np.ones((1, 1), np.float32)}})
    assert pool.length(sid) == 3
    with pytest.raises(StateError, match="stream 9 is not open"):
        pool.step({9: rules.feeds(np.array([[1]]), 0)})
    out = pool.step({sid: rules.feeds(np.array([[4]]), 3), 9: {}}, errors="return")
    assert isinstance(out[9], StateError) and "logits" in out[sid]


def test_kv_cache_bytes_too_small_is_refused() -> None:
    model, _ = _converted("llama", "explicit")
    with pytest.raises(OrtStateError, match="kv_cache_bytes must hold at least one stream at max_context"):
        ortstate.StreamPool(model, 4, max_context=64, kv_cache_bytes=1000)


@pytest.mark.parametrize("name", DECODERS)
def test_fresh_prompts_of_one_length_are_one_run(name: str) -> None:
    model, files = _converted(name, "explicit")
    pool = ortstate.StreamPool(model, 4, max_context=32)
    sessions = [ortstate.StatefulSession(model) for _ in range(3)]
    rules = _rules(sessions[0], files.folder)
    rng = np.random.default_rng(7)
    sids = [pool.open() for _ in sessions]
    feeds = {sid: rules.feeds(rng.integers(0, 200, (1, 6)), 0) for sid in sids}
    runs = pool.stats().runs
    got = pool.step(feeds)
    assert pool.stats().runs == runs + 1
    for sid, session in zip(sids, sessions):
        _check(got[sid], session.run(None, feeds[sid]), f"{name} stream {sid}")
    feeds = {sid: rules.feeds(rng.integers(0, 200, (1, 1)), 6) for sid in sids}  # the caches they left
    got = pool.step(feeds)
    for sid, session in zip(sids, sessions):
        _check(got[sid], session.run(None, feeds[sid]), f"{name} stream {sid} decode")


@pytest.mark.parametrize("form", ["custom-op", "explicit"])
def test_fused_and_copied_caches_step_in_one_run(form: str, tmp_path: Path) -> None:
    """A decoder with one attention fused (its cache appended to in place) and one composed (sinks
    computed at run time: its cache copied in and out), their caches of other heads and head sizes
    (2 x 8, 1 x 16): prompts, then ragged one-token steps of all streams in one run, each stream's
    logits a lone session's."""
    mixed = token_decoder([Spec(), Spec(heads=2, kv_heads=1, size=16, sink="computed")])
    xml = save_ir(mixed, tmp_path, "mixed")
    model = ortstate.convert(str(xml), explicit_state=form == "explicit")
    assert [row["as"] for row in read_attention_report(model) or []] == ["GroupQueryAttention", "composed"]
    pool = ortstate.StreamPool(model, 4, max_context=32)
    assert pool.batching == "ragged"

    def feeds(ids: list[int], past: int) -> dict[str, np.ndarray]:
        n = len(ids)
        return {"input_ids": np.array([ids]), "attention_mask": np.ones((1, past + n), np.int64),
                "beam_idx": np.zeros(1, np.int32)}  # fmt: skip

    rng = np.random.default_rng(4)
    shadows = [_Shadow(pool.open(), ortstate.StatefulSession(model)) for _ in range(3)]
    for s, n in zip(shadows, (3, 6, 1)):
        step = feeds(rng.integers(0, 32, n).tolist(), 0)
        _check(pool.step({s.sid: step})[s.sid], s.session.run(None, step), f"{form} prompt {s.sid}")
        s.past = n
    for round_ in range(4):
        runs = pool.stats().runs
        steps = {s.sid: feeds([int(rng.integers(0, 32))], s.past) for s in shadows}
        got = pool.step(steps)
        assert pool.stats().runs == runs + 1
        for s in shadows:
            _check(got[s.sid], s.session.run(None, steps[s.sid]), f"{form} round {round_} stream {s.sid}")
            s.past += 1
            assert pool.length(s.sid) == s.past

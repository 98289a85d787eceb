"""Automatic prefix caching in ContinuousBatcher and KvPool: a stream cut or copied at a prompt's
start holds what a fresh prefill of that start holds (logits within 1e-4), requests served from
the cache give a lone Generator's tokens while feeding only what no stream held (counted), their
``cached_tokens`` are the match, and the cache is evicted least recently used within the KV budget,
never a running stream's rows or a kept stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ortstate.errors import StateError
from ortstate.generate import ContinuousBatcher, Generator

MODELS = Path(__file__).resolve().parents[2] / "models" / "llm"
# llama: fused attention; qwen2: another family; gemma3n_text: caches copied in and out of the
# arena (no fused attention), two layers sharing one; gpt_oss: attention sinks, sliding windows
NAMES = ["llama", "qwen2", "gemma3n_text", "gpt_oss"]
SYSTEM = [int(t) for t in np.random.default_rng(5).integers(3, 200, 40)]  # a shared system prompt


def _own(i: int) -> list[int]:
    return [200 + i, 7 + i, 9]  # each prompt's own: parts from the others at its first token


def _logits(batcher: ContinuousBatcher, sid: int, ids: list[int], first: int) -> np.ndarray:
    """Stream ``sid`` fed ``ids`` from position ``first``: each position's logits."""
    feeds = batcher.rules.feeds(np.array([ids], np.int64), first)
    return batcher.pool.step({sid: feeds})[sid]["logits"][0]


@pytest.mark.parametrize("name", NAMES)
def test_a_cut_or_copied_start_holds_what_a_fresh_prefill_does(name: str) -> None:
    """A stream fed another prompt that shares the first 30 tokens, copied (``fork(sid, 30)``) or
    cut (``trim``) there, then fed the rest: its logits are a fresh prefill's within 1e-4."""
    prompt = SYSTEM[:30] + [5, 6, 7, 8]
    other = SYSTEM + [9, 9]
    with ContinuousBatcher.from_dir(MODELS / name) as batcher:
        pool = batcher.pool
        assert pool.prefix_sharing
        fresh = _logits(batcher, pool.open(), prompt, 0)[30:]
        donor = pool.open()
        _logits(batcher, donor, other, 0)
        copy = pool.fork(donor, 30)
        assert pool.length(copy) == 30 and pool.length(donor) == len(other)
        np.testing.assert_allclose(_logits(batcher, copy, prompt[30:], 30), fresh, atol=1e-4, rtol=0)
        pool.trim(donor, 30)
        np.testing.assert_allclose(_logits(batcher, donor, prompt[30:], 30), fresh, atol=1e-4, rtol=0)
        with pytest.raises(StateError, match="cannot cut it to 35 positions: it holds 34 positions"):
            pool.fork(copy, 35)


def test_a_state_that_is_not_kv_alone_is_never_cut() -> None:
    """A hybrid's convolution states sum up every token: no prefix of it can be cut, so the
    batcher caches nothing (it runs as before)."""
    with ContinuousBatcher.from_dir(MODELS / "lfm2") as batcher:
        assert not batcher.pool.prefix_sharing and not batcher.prefix_cache
        sid = batcher.pool.open()
        _logits(batcher, sid, SYSTEM[:5], 0)
        with pytest.raises(StateError, match="cannot cut it to 2 positions: its state is not KV caches alone"):
            batcher.pool.trim(sid, 2)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_prompts_sharing_a_system_prompt_feed_it_once(name: str, lone: Callable[[str], Generator]) -> None:
    """generate_many of 4 prompts sharing a 40-token system prompt: the first feeds it, the others
    wait for it and feed only their own 3 tokens; every request's tokens are a lone Generator's
    (greedy, and sampled with a seed and 2 choices)."""
    prompts = [SYSTEM + _own(i) for i in range(4)]
    greedy = [lone(name).generate(p, 8, stop_at_eos=False) for p in prompts]
    search = {"do_sample": True, "seed": 3, "top_k": 20, "n": 2}
    sampled = lone(name).generate_batch(prompts, 8, stop_at_eos=False, **search)
    for cache, fed in ((True, 43 + 3 * 3), (False, 4 * 43)):
        with ContinuousBatcher.from_dir(MODELS / name, max_num_batched_tokens=16, prefix_cache=cache) as batcher:
            assert batcher.generate_many(prompts, 8, stop_at_eos=False) == greedy
            assert batcher.stats()["prefilled"] == fed
            batcher.reset_prefix_cache()
            assert batcher.generate_many(prompts, 8, stop_at_eos=False, **search) == sampled
            assert batcher.pool.streams == [] or cache


async def _stream(batcher: ContinuousBatcher, prompt: list[int], new: int, **search: object) -> tuple[list, int]:
    stream = batcher.stream(prompt, new, stop_at_eos=False, **search)
    items = [item async for item in stream]
    return items, stream.cached_tokens


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_cached_tokens_are_the_match_and_a_chat_turn_takes_the_last_one(
    name: str, lone: Callable[[str], Generator]
) -> None:
    """cached_tokens: 0 cold; the whole prompt but its last token when it was all held; a chat's
    next turn (the last prompt, its answer, a new message) holds all the last turn's stream held;
    a prompt parting from the cache holds up to where it parts. Tokens are a lone Generator's; the
    logprobs a cold batcher's within 1e-4."""
    gen, prompt = lone(name), SYSTEM + _own(0)
    with ContinuousBatcher.from_dir(MODELS / name) as batcher:
        answer, cached = asyncio.run(_stream(batcher, prompt, 6))
        assert answer == gen.generate(prompt, 6, stop_at_eos=False) and cached == 0
        assert asyncio.run(_stream(batcher, prompt, 6)) == (answer, len(prompt) - 1)
        turn = prompt + answer + [11, 12, 13]
        got, cached = asyncio.run(_stream(batcher, turn, 6, logprobs=3))
        assert cached == len(prompt) + len(answer) - 1  # the answer's last token was never fed
        assert [s.token for s in got] == gen.generate(turn, 6, stop_at_eos=False)
        parted = SYSTEM[:20] + [250, 251]
        assert asyncio.run(_stream(batcher, parted, 2))[1] == 20
    with ContinuousBatcher.from_dir(MODELS / name, prefix_cache=False) as cold:
        scored, cached = asyncio.run(_stream(cold, turn, 6, logprobs=3))
        assert cached == 0 and [s.token for s in scored] == [s.token for s in got]
    for warm, fresh in zip(got, scored):
        np.testing.assert_allclose(warm.logprob, fresh.logprob, atol=1e-4, rtol=0)
        np.testing.assert_allclose([t[1] for t in warm.top], [t[1] for t in fresh.top], atol=1e-4, rtol=0)


def test_the_least_recently_used_entry_is_evicted_never_a_running_or_kept_stream(
    lone: Callable[[str], Generator],
) -> None:
    """A KV budget of 130 positions, requests reaching 60 each: two cached streams and a third
    request do not fit, so the least recently used is evicted; the pool never moves a running
    request's stream out, and a kept stream continues exactly."""
    gen = lone("llama")
    a, b, c = ([t + k for t in SYSTEM[:20]] for k in (0, 1, 2))
    with ContinuousBatcher.from_dir(MODELS / "llama", max_context=64) as batcher:
        budget = batcher.pool.token_bytes * 130
    with ContinuousBatcher.from_dir(MODELS / "llama", max_context=64, kv_cache_bytes=budget) as batcher:
        for prompt in (a, b, c):  # c evicts a (b was used more recently)
            assert asyncio.run(_stream(batcher, prompt, 40))[1] == 0
        assert batcher.stats()["cached"] == 2
        assert asyncio.run(_stream(batcher, b, 40)) == (gen.generate(b, 40, stop_at_eos=False), 19)
        assert asyncio.run(_stream(batcher, a, 40))[1] == 0  # evicted
        assert batcher.pool.stats().preempted == 0  # no running stream moved out for the cache
        kept = asyncio.run(batcher.keep())
        assert asyncio.run(_kept_turn(batcher, kept, a)) == gen.generate(a, 4, stop_at_eos=False)
        for prompt in (b, c):
            asyncio.run(_stream(batcher, prompt, 40))
        turn = kept.tokens + [5, 6]
        assert kept.reuses(turn) == len(kept.tokens) > 0
        assert asyncio.run(_kept_turn(batcher, kept, turn)) == gen.generate(turn, 4, stop_at_eos=False)


async def _kept_turn(batcher: ContinuousBatcher, kept: object, prompt: list[int]) -> list[int]:
    return [t async for t in batcher.stream(prompt, 4, stop_at_eos=False, kept=kept)]

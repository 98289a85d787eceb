"""ContinuousBatcher: every request's tokens equal to a lone Generator's (greedy, sampled with a
seed, streamed), on decoders that batch ragged, uniform (no position_ids) and mamba-style, with
prompts chunked, requests waiting for rows or KV memory, and cancelled streams."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ortstate.errors import GenerationError, RunError, StateError
from ortstate.generate import ContinuousBatcher, Generator, KeptStream

MODELS = Path(__file__).resolve().parents[2] / "models" / "llm"
# gpt_oss: attention sinks in the fused kernel; xglm, gpt_neox_japanese: no fused attention (their
# caches are copied), the second batching uniform (no position_ids); gemma3n_text: caches shared by
# two layers (copied)
NAMES = [
    "llama",
    "gemma2",
    "mistral",
    "lfm2",
    "zamba2",
    "qwen3_next",
    "llama_int4",
    "gpt_oss",
    "xglm",
    "gpt_neox_japanese",
    "gemma3n_text",
]


def _prompts(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, 200, n)] for n in (3, 9, 15, 1, 20, 5)]


@pytest.mark.parametrize("name", NAMES)
def test_tokens_equal_lone_generators(name: str, lone: Callable[[str], Generator]) -> None:
    gen = lone(name)
    prompts = _prompts(len(name))
    # 7 prompt tokens a tick: long prompts are fed over several ticks beside the decoding requests
    with ContinuousBatcher.from_dir(MODELS / name, max_num_batched_tokens=7) as batcher:
        greedy = batcher.generate_many(prompts, 10, stop_at_eos=False)
        assert greedy == [gen.generate(p, 10, stop_at_eos=False) for p in prompts]
        search = {"do_sample": True, "seed": 11, "top_p": 0.9, "temperature": 0.7, "top_k": 20}
        sampled = batcher.generate_many(prompts, 10, stop_at_eos=False, **search)
        assert sampled == [gen.generate(p, 10, stop_at_eos=False, **search) for p in prompts]
        assert sampled != greedy

        async def streams() -> list[list[int]]:
            async def one(prompt: list[int]) -> list[int]:
                return [t async for t in batcher.stream(prompt, 10, stop_at_eos=False)]

            return await asyncio.gather(*(one(p) for p in prompts))

        assert asyncio.run(streams()) == greedy
        # every request gave its stream back: to the prefix cache, where the model's state is KV alone
        assert len(batcher.pool.streams) == batcher.stats()["cached"]
        hybrid = name in ("lfm2", "zamba2", "qwen3_next")  # convolution or SSM states beside the KV
        assert batcher.prefix_cache == (batcher.stats()["cached"] > 0) == (not hybrid)


def test_requests_wait_for_rows_and_kv_memory(lone: Callable[[str], Generator]) -> None:
    gen = lone("llama")
    prompts = _prompts(3)
    want = [gen.generate(p, 12, stop_at_eos=False, stop_token_ids=[7]) for p in prompts]
    with ContinuousBatcher.from_dir(MODELS / "llama", slots=2, max_context=40) as batcher:
        assert batcher.generate_many(prompts, 12, stop_at_eos=False, stop_token_ids=[7]) == want
    probe = ContinuousBatcher.from_dir(MODELS / "llama", max_context=40)
    room = probe.pool.token_bytes * 41  # 41 positions: the requests wait for memory
    probe.close()
    with ContinuousBatcher.from_dir(MODELS / "llama", max_context=40, kv_cache_bytes=room) as batcher:
        assert batcher.generate_many(prompts, 12, stop_at_eos=False, stop_token_ids=[7]) == want
        assert batcher.pool.stats().max_batch == 2  # 41 positions: two requests reach at most 15 + 21


def test_a_stream_left_early_is_cancelled_and_the_others_go_on(lone: Callable[[str], Generator]) -> None:
    gen = lone("llama")
    prompts = _prompts(5)

    async def run(batcher: ContinuousBatcher) -> tuple[list[int], list[int]]:
        async def first_three() -> list[int]:
            got = []
            async for token in batcher.stream(prompts[0], 30, stop_at_eos=False):
                got.append(token)
                if len(got) == 3:
                    break
            return got

        async def whole() -> list[int]:
            return [t async for t in batcher.stream(prompts[1], 30, stop_at_eos=False)]

        return await asyncio.gather(first_three(), whole())

    with ContinuousBatcher.from_dir(MODELS / "llama") as batcher:
        early, full = asyncio.run(run(batcher))
        assert early == gen.generate(prompts[0], 3, stop_at_eos=False)
        assert full == gen.generate(prompts[1], 30, stop_at_eos=False)
        for _ in range(50):  # the cancelled request's stream is the cache's at the engine's next tick
            if len(batcher.pool.streams) == batcher.stats()["cached"]:
                break
            asyncio.run(asyncio.sleep(0.01))
        assert len(batcher.pool.streams) == batcher.stats()["cached"]


def test_bad_requests_are_refused_before_anything_runs() -> None:
    with ContinuousBatcher.from_dir(MODELS / "llama", max_context=32) as batcher:
        with pytest.raises(GenerationError, match="does not batch beam search"):
            batcher.generate_many([[1, 2]], 4, num_beams=2)
        with pytest.raises(GenerationError, match="the prompt is empty: give at least one token id"):
            batcher.generate_many([[]], 4)
        with pytest.raises(GenerationError, match="reach past the pool's max_context of 32"):
            batcher.generate_many([[1] * 30], 4)
        with pytest.raises(GenerationError, match="max_new_tokens must be an integer >= 1"):
            batcher.generate_many([[1]], 0)
        assert batcher.ticks == 0


def test_a_consumer_whose_event_loop_closed_disturbs_no_other_request(lone: Callable[[str], Generator]) -> None:
    import threading

    gen = lone("llama")
    prompts = _prompts(9)
    got: list[list[list[int]]] = []
    with ContinuousBatcher.from_dir(MODELS / "llama") as batcher:
        worker = threading.Thread(target=lambda: got.append(batcher.generate_many(prompts, 40, stop_at_eos=False)))
        worker.start()

        async def first_two() -> list[int]:
            tokens = []
            async for token in batcher.stream(prompts[2], 40, stop_at_eos=False):
                tokens.append(token)
                if len(tokens) == 2:
                    break
            return tokens

        for _ in range(5):  # each loop closes while its request may still be picking tokens
            assert asyncio.run(first_two()) == gen.generate(prompts[2], 2, stop_at_eos=False)
        worker.join(60)
    assert got == [[gen.generate(p, 40, stop_at_eos=False) for p in prompts]]


@pytest.mark.parametrize("name", NAMES)
def test_a_kept_stream_feeds_only_what_its_cache_lacks(name: str, lone: Callable[[str], Generator], tmp_path) -> None:
    """A conversation's turns on one kept stream: each equal to a lone Generator fed the whole
    prompt; through a snapshot and back; a prompt that does not start with the cache is fed whole."""
    gen = lone(name)

    async def run(batcher: ContinuousBatcher, prompt: list[int], kept: KeptStream) -> list[int]:
        tokens = [t async for t in batcher.stream(prompt, 6, stop_at_eos=False, kept=kept)]
        for _ in range(500):  # the engine's thread lets go of the stream as the request ends
            if not kept.busy:
                break
            await asyncio.sleep(0.002)
        return tokens

    with ContinuousBatcher.from_dir(MODELS / name, max_num_batched_tokens=7) as batcher:
        kept = asyncio.run(batcher.keep())
        first = [5, 6, 7, 8, 9, 10, 11]
        tokens = asyncio.run(run(batcher, first, kept))
        assert tokens == gen.generate(first, 6, stop_at_eos=False)
        assert kept.tokens == (first + tokens)[:-1]  # the last token is not fed yet
        for more in ([20], [20, 21, 22], list(range(20, 31))):  # one token, fewer than a chunk, more
            prompt = kept.tokens + [tokens[-1], *more]
            assert kept.reuses(prompt) == len(kept.tokens)
            tokens = asyncio.run(run(batcher, prompt, kept))
            assert tokens == gen.generate(prompt, 6, stop_at_eos=False), more
        asyncio.run(batcher.save_kept(kept, tmp_path / "kept.npz"))
        held = list(kept.tokens)
        asyncio.run(batcher.forget(kept))
        kept = asyncio.run(batcher.load_kept(tmp_path / "kept.npz", held))
        prompt = held + [tokens[-1], 40, 41]
        assert asyncio.run(run(batcher, prompt, kept)) == gen.generate(prompt, 6, stop_at_eos=False)
        other = [9, 9, 9, *prompt]  # not the cache's start: fed whole from an empty cache
        assert kept.reuses(other) == 0
        assert asyncio.run(run(batcher, other, kept)) == gen.generate(other, 6, stop_at_eos=False)
        assert kept.tokens == other + gen.generate(other, 6, stop_at_eos=False)[:-1]
        with pytest.raises(StateError, match=f"its caches hold {len(held)} positions, its tokens are 2"):
            asyncio.run(batcher.load_kept(tmp_path / "kept.npz", [1, 2]))
        asyncio.run(batcher.forget(kept))
        assert batcher.pool.streams == []


def test_a_tick_that_fails_ends_its_requests_and_the_batcher_goes_on(
    lone: Callable[[str], Generator], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a tick (not a request's own error) ends the requests running, those choices too
    that were to start on copies of a prompt fed in that tick; later requests run as before."""
    import threading

    gen = lone("llama")
    with ContinuousBatcher.from_dir(MODELS / "llama") as batcher:
        step, calls = batcher.pool.step, []

        def first_fails(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls.append(1)
            if len(calls) == 1:
                raise ZeroDivisionError("a bug")
            return step(*args, **kwargs)

        monkeypatch.setattr(batcher.pool, "step", first_fails)
        got: list[BaseException] = []

        def generate() -> None:
            try:
                batcher.generate_many([[1, 2, 3]], 4, do_sample=True, seed=1, n=2)
            except RunError as exc:
                got.append(exc)

        worker = threading.Thread(target=generate)
        worker.start()
        worker.join(60)
        assert not worker.is_alive() and [str(e) for e in got] == ["generation failed: a bug"]
        assert batcher.pool.streams == []
        prompts = _prompts(2)
        assert batcher.generate_many(prompts, 6, stop_at_eos=False) == [
            gen.generate(p, 6, stop_at_eos=False) for p in prompts
        ]

"""One owner of a KV pool: ContinuousBatcher's engine runs in the pool's own thread (its PoolLoop's
worker), so generation, ``pool.submit`` steps and ``pool.call`` commands take turns there, and no
code on an event loop waits for a run: each result still equals a lone Generator's or a lone
StatefulSession's."""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ortstate
from ortstate.decoders.feeds import FeedRules
from ortstate.decoders.model_dir import find_model_files, read_config
from ortstate.errors import OrtStateError
from ortstate.generate import ContinuousBatcher, Generator
from ortstate.generate.session_inputs import input_specs
from ortstate.streams.kv_pool import KvPool

MODELS = Path(__file__).resolve().parents[2] / "models" / "llm"


def test_generation_submitted_steps_and_commands_share_one_thread() -> None:
    folder = MODELS / "llama"
    lone = Generator.from_dir(folder)
    model = ortstate.convert(str(find_model_files(folder).decoder), explicit_state=True)
    rules = FeedRules.for_model(input_specs(ortstate.StatefulSession(model).get_inputs()), read_config(folder))
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9]]
    rng = np.random.default_rng(7)
    steps = [rng.integers(0, 200, (1, n)) for n in (4, 1, 1, 2, 1, 1)]
    before = {t.name for t in threading.enumerate()}

    with ContinuousBatcher.from_dir(folder) as batcher:
        pool = batcher.pool

        async def main() -> tuple[list[list[int]], list[np.ndarray], list[str]]:
            sid = await pool.call(pool.open)
            seen: list[str] = []

            async def generate(prompt: list[int]) -> list[int]:
                return [t async for t in batcher.stream(prompt, 12, stop_at_eos=False)]

            async def step_alone() -> list[np.ndarray]:
                out, past = [], 0
                for ids in steps:
                    result = await pool.submit(sid, rules.feeds(ids, past))
                    seen.append(await pool.call(threading.current_thread))  # where commands run
                    out.append(result["logits"])
                    past += ids.shape[1]
                return out

            *tokens, logits = await asyncio.gather(*(generate(p) for p in prompts), step_alone())
            return tokens, logits, [t.name for t in seen]

        tokens, logits, threads = asyncio.run(main())
        assert tokens == [lone.generate(p, 12, stop_at_eos=False) for p in prompts]
        session, past = ortstate.StatefulSession(model), 0
        for ids, got in zip(steps, logits):
            want = session.run(None, rules.feeds(ids, past))[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            past += ids.shape[1]
        assert set(threads) == {"ortstate-pool"}  # commands ran in the pool's thread, as the engine did
        made = {t.name for t in threading.enumerate()} - before
        assert "ortstate-batcher" not in made  # the engine has no thread of its own


def test_the_event_loop_never_waits_on_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs made slow (0.2 s each, the pool's lock held, as a long ONNX Runtime run holds it): the
    OpenAI server's conversations make, park and restore kept streams while requests decode, and
    the event loop goes on meanwhile (their pool work waits in the pool's queue, not on the lock)."""
    conversations_module = pytest.importorskip("ortstate.serve.conversations")
    slow = 0.2
    decode = KvPool.decode

    def slow_decode(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        with self._lock:
            time.sleep(slow)
            return decode(self, *args, **kwargs)

    monkeypatch.setattr(KvPool, "decode", slow_decode)
    with ContinuousBatcher.from_dir(MODELS / "llama") as batcher, tempfile.TemporaryDirectory() as state:
        conversations = conversations_module.Conversations(batcher, state, limit=1)

        async def main() -> float:
            generation = asyncio.ensure_future(_drain(batcher))
            await asyncio.sleep(0.3)  # decoding: every run takes 0.2 s
            gaps, last = [], time.perf_counter()

            async def beat() -> None:
                nonlocal last
                while not generation.done():
                    await asyncio.sleep(0.005)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now

            beating = asyncio.ensure_future(beat())
            await conversations.take("a")  # a new kept stream
            conversations.done("a")
            await conversations.take("b")  # room for it: "a" is parked
            conversations.done("b")
            await conversations.take("a")  # "a" restored, "b" parked
            conversations.done("a")
            await generation
            await beating
            assert conversations.parked == 1
            return max(gaps)

        longest = asyncio.run(main())
        assert longest < slow / 2, f"the event loop stalled {longest:.3f} s"


async def _drain(batcher: ContinuousBatcher) -> list[int]:
    return [t async for t in batcher.stream([1, 2, 3], 6, stop_at_eos=False)]


def test_a_second_batcher_on_one_pool_is_refused() -> None:
    with ContinuousBatcher.from_dir(MODELS / "llama") as batcher:
        with pytest.raises(OrtStateError, match="already has a batcher"):
            batcher.pool.loop.attach(object())  # type: ignore[arg-type]
    batcher.pool.loop.attach(_Idle())  # closed: its place is free


class _Idle:
    def pending(self) -> bool:
        return False

    def run(self) -> None:
        raise AssertionError("never run")

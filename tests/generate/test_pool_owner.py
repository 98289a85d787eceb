"""One owner of a KV pool: ContinuousBatcher's engine runs in the pool's own thread (its PoolLoop's
worker), so generation, ``pool.submit`` steps and ``pool.call`` commands take turns there, and no
code on an event loop waits for a run: each result still equals a lone Generator's or a lone
StatefulSession's."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ortstate
from ortstate.decoders import input_specs
from ortstate.decoders.feeds import FeedRules
from ortstate.decoders.model_dir import find_model_files, read_config
from ortstate.errors import OrtStateError
from ortstate.generate import ContinuousBatcher, Generator
from ortstate.streams import KvPool

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


class Gate:
    """Where each run, holding the pool's lock (as a long ONNX Runtime run holds it), waits until
    the event loop lets it end: a run that waits a minute found the event loop stopped (waiting for
    it: a deadlock but for this limit), and counts a stall."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.held = self.opened = False
        self.runs = self.stalls = 0

    def hold(self) -> None:
        with self.changed:
            self.runs += 1
            self.held, self.opened = True, False
            self.changed.notify_all()
            # after one stall, the rest run through: the test has failed, and fails in a minute
            if not self.stalls and not self.changed.wait_for(lambda: self.opened, timeout=60):
                self.stalls += 1
            self.held = False

    def open(self) -> None:
        with self.changed:
            self.opened = True
            self.changed.notify_all()


class WatchedLock:
    """A pool's lock, counting the times a thread running an event loop takes it."""

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock
        self.on_event_loop = 0

    def __enter__(self) -> WatchedLock:
        self.lock.acquire()
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a thread running no event loop: the pool's own, or set-up and close
            return self
        self.on_event_loop += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)


def test_the_event_loop_never_waits_on_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OpenAI server's conversations make, park and restore kept streams, each started while a
    decoding run holds the pool's lock, which it keeps until the event loop has gone on past the
    start (their pool work waits in the pool's queue, not on the lock): no run finds the event loop
    stopped, and the event loop's thread never takes the pool's lock at all."""
    conversations_module = pytest.importorskip("ortstate.serve.openai.conversations")
    gate, decode = Gate(), KvPool.decode

    def gated_decode(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        with self._lock:
            gate.hold()
            return decode(self, *args, **kwargs)

    monkeypatch.setattr(KvPool, "decode", gated_decode)
    with ContinuousBatcher.from_dir(MODELS / "llama") as batcher, tempfile.TemporaryDirectory() as state:
        lock = batcher.pool._lock = WatchedLock(batcher.pool._lock)
        conversations = conversations_module.Conversations(batcher, state, limit=1)

        async def main() -> None:
            # long enough that the three takes below (each waits for runs while its files are
            # written, more of them on a loaded machine) start while it still runs
            generation = asyncio.ensure_future(_drain(batcher, 64))

            async def release_runs_until(done: Callable[[], bool]) -> None:
                while not done():
                    await asyncio.sleep(0.001)
                    if gate.held:
                        gate.open()

            async def during_a_run(name: str) -> None:
                await until(lambda: gate.held)
                taking = asyncio.ensure_future(conversations.take(name))
                for _ in range(5):
                    await asyncio.sleep(0)  # the take runs up to its wait for the pool
                gate.open()  # the event loop went on: the run may end
                await release_runs_until(taking.done)
                await taking
                conversations.done(name)

            await during_a_run("a")  # a new kept stream
            await during_a_run("b")  # room for it: "a" is parked
            await during_a_run("a")  # "a" restored, "b" parked
            await release_runs_until(generation.done)
            await generation
            assert conversations.parked == 1

        asyncio.run(main())
    assert gate.runs >= 3 and gate.stalls == 0 and lock.on_event_loop == 0, (gate.runs, gate.stalls, lock.on_event_loop)


async def _drain(batcher: ContinuousBatcher, tokens: int) -> list[int]:
    return [t async for t in batcher.stream([1, 2, 3], tokens, stop_at_eos=False)]


def test_a_second_batcher_on_one_pool_is_refused() -> None:
    with ContinuousBatcher.from_dir(MODELS / "llama") as batcher:
        with pytest.raises(OrtStateError, match="already has a batcher"):
            batcher.pool.worker.attach(object())  # type: ignore[arg-type]
    batcher.pool.worker.attach(_Idle())  # closed: its place is free


class _Idle:
    def pending(self) -> bool:
        return False

    def run(self) -> None:
        raise AssertionError("never run")

"""The pool's loop on every supported Python: a lone submission, which no other fills a tick for,
runs once ``max_delay`` has passed (on Python 3.10 ``asyncio.wait_for`` times out with
``asyncio.TimeoutError``, not the builtin: catching the builtin killed the tick task there, and a
lone ``submit`` waited forever)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest
from oracle import REPO

import ortstate
from ortstate.streams import loop as loop_module

MODEL = REPO / "models" / "lstm_2l_dynbatch" / "model.xml"
DELAY = 0.05


class Clock:
    """The loop's ``time.perf_counter``: it moves only when the test moves it, and counts how many
    times the loop has read it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0

    def perf_counter(self) -> float:
        self.reads += 1
        return self.now


async def until(condition: Callable[[], bool]) -> None:
    """Return once ``condition()`` holds (a minute at most: a loop that never gets there has hung)."""

    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.001)

    await asyncio.wait_for(poll(), 60)


def test_a_lone_submit_runs_once_the_delay_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop reads a lone submission's deadline off its clock and waits, however often it looks
    (the step has not run), until the clock reaches it; then the step runs, alone in its tick, and
    the tick's latency is the delay. Each submission after it runs too (none waits forever), with
    the outputs of a lone session's steps."""
    clock = Clock()
    monkeypatch.setattr(loop_module, "time", clock)
    pool = ortstate.StreamPool(MODEL, slots=4, max_batch=4, max_delay=DELAY)
    lone = ortstate.StatefulSession(MODEL).create_infer_request()
    for var in lone.query_state():
        var.state = np.zeros([2, 1, 16], np.float32)
    sid = pool.open()
    feeds = [{"x": np.full((1, 1, 8), k, np.float32)} for k in range(3)]

    async def steps() -> list[dict[str, np.ndarray]]:
        done = []
        for k, fed in enumerate(feeds):  # one at a time: each tick has one stream of the four it could batch
            reads = clock.reads
            stepping = asyncio.ensure_future(pool.submit(sid, fed))
            # the submission's time, then the deadline read against the clock, again and again
            await until(lambda reads=reads, k=k: clock.reads >= reads + 4 or pool.stats().runs > k)
            if k == 0:  # (a later one may come in as the loop ends a tick: it joins the next at once)
                assert not stepping.done() and pool.stats().runs == 0
            clock.now += DELAY
            done.append(await asyncio.wait_for(stepping, 60))
            if k == 0:
                assert pool.stats().tick_p50 == DELAY  # from the submission to the results, on its clock
        return done

    for got, fed in zip(asyncio.run(steps()), feeds):
        np.testing.assert_allclose(got["y"], lone.infer(fed)["y"], rtol=1e-6, atol=1e-6)
    stats = pool.stats()
    assert stats.runs == stats.steps == len(feeds)  # a tick for each, alone


def test_a_failure_of_the_loop_itself_answers_every_waiting_call(monkeypatch) -> None:
    """A bug inside a round (not a caller's error) reaches every caller of the round as an
    OrtStateError: none waits forever, and the loop goes on."""
    pool = ortstate.StreamPool(MODEL, slots=2, max_batch=2, max_delay=0.001)
    worker = pool.worker
    real = worker._round

    def broken(items):
        worker._round = real  # once
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(worker, "_round", broken)

    async def calls() -> tuple:
        first = await asyncio.gather(pool.call(pool.open), return_exceptions=True)
        second = await asyncio.wait_for(pool.call(pool.open), 10)
        return first[0], second

    first, second = asyncio.run(calls())
    assert isinstance(first, ortstate.OrtStateError) and "the pool's loop failed: ZeroDivisionError('a bug')" in str(
        first
    )
    assert isinstance(second, int)

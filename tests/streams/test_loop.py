"""The pool's loop on every supported Python: a lone submission, which no other fills a tick for,
runs once ``max_delay`` has passed (on Python 3.10 ``asyncio.wait_for`` times out with
``asyncio.TimeoutError``, not the builtin: catching the builtin killed the tick task there, and a
lone ``submit`` waited forever)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from oracle import REPO

import ortstate

MODEL = REPO / "models" / "lstm_2l_dynbatch" / "model.xml"


def test_a_lone_submit_runs_after_the_delay() -> None:
    pool = ortstate.StreamPool(MODEL, slots=4, max_batch=4, max_delay=0.05)
    session = ortstate.StatefulSession(MODEL)
    lone = session.create_infer_request()
    for var in lone.query_state():
        var.state = np.zeros([2, 1, 16], np.float32)
    sid = pool.open()
    feeds = [{"x": np.full((1, 1, 8), k, np.float32)} for k in range(3)]

    async def steps() -> list[tuple[float, dict[str, np.ndarray]]]:
        done = []
        for fed in feeds:  # one at a time: each tick has one stream of the four it could batch
            await asyncio.sleep(0.1)  # the last tick's task has ended: no tick follows at once
            start = time.monotonic()
            outputs = await asyncio.wait_for(pool.submit(sid, fed), 10)
            done.append((time.monotonic() - start, outputs))
        return done

    for (took, got), fed in zip(asyncio.run(steps()), feeds):
        assert 0.04 <= took < 5, took  # it waited for the delay, then ran
        np.testing.assert_allclose(got["y"], lone.infer(fed)["y"], rtol=1e-6, atol=1e-6)


def test_a_failure_of_the_loop_itself_answers_every_waiting_call(monkeypatch) -> None:
    """A bug inside a round (not a caller's error) reaches every caller of the round as an
    OrtStateError: none waits forever, and the loop goes on."""
    pool = ortstate.StreamPool(MODEL, slots=2, max_batch=2, max_delay=0.001)
    loop = pool.loop
    real = loop._round

    def broken(items):
        loop._round = real  # once
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(loop, "_round", broken)

    async def calls() -> tuple:
        first = await asyncio.gather(pool.call(pool.open), return_exceptions=True)
        second = await asyncio.wait_for(pool.call(pool.open), 10)
        return first[0], second

    first, second = asyncio.run(calls())
    assert isinstance(first, ortstate.OrtStateError) and "the pool's loop failed: ZeroDivisionError('a bug')" in str(
        first
    )
    assert isinstance(second, int)

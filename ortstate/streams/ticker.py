"""``await pool.submit(sid, feeds)``: concurrent submissions batched per tick.

A tick starts at the first waiting submission and runs once ``max_batch`` streams wait or
``max_delay`` seconds have passed: it steps every waiting stream once (the oldest submission of
each, as Triton's "oldest" sequence batcher: a stream's next step waits for the next tick), in one
batched run per feed shape, and hands each submission its own outputs or its own error. The run
happens in a worker thread, so the event loop goes on (other coroutines run, new submissions wait
for the next tick) while it does.

Under load, ticks follow one another without waiting: when submissions came in while a tick ran,
the next tick takes them at once (continuous batching), so a busy stream's step waits for the tick
running when it came (and, past ``max_batch`` streams, the ticks ahead of it), never for a delay
besides.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import OrtStateError

if TYPE_CHECKING:
    from .pool import StreamPool

__all__ = ["Ticker"]

_KEPT = 4096


class Ticker:
    """The submissions waiting for a pool's next tick, and the task that runs the ticks."""

    def __init__(self, pool: StreamPool, max_batch: int, max_delay: float) -> None:
        if type(max_batch) is not int or max_batch < 1 or not max_delay >= 0:
            raise OrtStateError(f"max_batch must be >= 1 and max_delay >= 0, got {max_batch!r}, {max_delay!r}")
        self.pool = pool
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.latencies: deque[float] = deque(maxlen=_KEPT)
        self._waiting: list[tuple[int, Mapping[str, Any], asyncio.Future, float]] = []
        self._streams: set[int] = set()  # the streams among the waiting submissions
        self._full: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def submit(self, sid: int, feeds: Mapping[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._waiting.append((sid, feeds, future, time.perf_counter()))
        self._streams.add(sid)
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._full = asyncio.Event()
            self._task = loop.create_task(self._ticks())
        if len(self._streams) >= self.max_batch and self._full is not None:
            self._full.set()
        return await future

    async def _ticks(self) -> None:
        full, busy = self._full, False
        assert full is not None
        while self._waiting:
            if not full.is_set() and not busy:
                try:
                    await asyncio.wait_for(full.wait(), self.max_delay)
                except asyncio.TimeoutError:  # noqa: UP041 - not the builtin before Python 3.11
                    pass
            full.clear()
            await self._tick()
            await asyncio.sleep(0)  # let the stepped streams submit their next steps
            busy = bool(self._waiting)  # steps came in while it ran: the next tick runs at once

    async def _tick(self) -> None:
        batch: dict[int, tuple[Mapping[str, Any], asyncio.Future, float]] = {}
        later = []
        for item in self._waiting:
            sid, feeds, future, since = item
            if future.done():  # cancelled while it waited
                continue
            if sid in batch or len(batch) >= self.max_batch:
                later.append(item)
            else:
                batch[sid] = (feeds, future, since)
        self._waiting = later
        self._streams = {sid for sid, *_ in later}
        if not batch:
            return
        feeds = {sid: feeds for sid, (feeds, _, _) in batch.items()}
        try:  # in a worker thread: the loop keeps taking submissions (for the next tick) meanwhile
            results = await asyncio.to_thread(self.pool.step, feeds, "return")
        except Exception as exc:  # noqa: BLE001 - every submission of the tick gets it
            results = dict.fromkeys(batch, exc)
        now = time.perf_counter()
        self.latencies.append(now - min(since for _, _, since in batch.values()))
        for sid, (_, future, _) in batch.items():
            if future.done():
                continue
            result = results[sid]
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

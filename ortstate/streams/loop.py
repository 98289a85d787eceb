"""The one loop that owns a pool: steps, commands and generation through one queue, run by one
thread, round after round.

vLLM's engine core, for any pool: ``await pool.submit(sid, feeds)`` and ``await pool.call(fn, ...)``
put an item on the loop's queue and wait on an asyncio future; a pool's *worker*
(:meth:`PoolLoop.attach`: ``ortstate.generate``'s engine of continuous batching) gets its messages
(requests, cancels) through the same queue (:meth:`PoolLoop.post`). One thread takes the queue in
order; each *round* it runs the commands (open, reset, close, park, ...) between runs of ONNX
Runtime, in the order they came, the tick of the steps waiting (every waiting stream once, at most
``max_batch`` streams, in one ``pool.step``), and then the worker's tick (its requests' decode and
prompt chunks): what was submitted and what is generated run in the same round, one after the
other, and a command never runs beside either. Nothing on the event loop takes the pool's lock, so
no coroutine waits for a run it is not part of.

Which of the queued items a round runs, and when a round starts, is decided by
:mod:`ortstate.scheduler.rounds`: a round starts once a command waits, ``max_batch`` streams wait
or ``max_delay`` seconds after the first submission, at once while the worker has work; when
submissions came in while a round ran, the next takes them at once (continuous batching). A command
that names a stream stepping in the tick being gathered runs after that tick; one that concerns
every stream (``sid=ALL``) after every step queued before it.

``on_commit`` (the durable log of :mod:`ortstate.serve.journal`) is called in the loop's thread once
per round, after its commands and its tick ran and before any of their futures is answered (and
once more before a command that follows a tick of its stream): a reply is sent only once what it
acknowledges is on disk. If it raises, every item it covers gets its error.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import OrtStateError
from ..scheduler.rounds import Queued, plan_round, ready
from .stats import LATENCY_WINDOW

if TYPE_CHECKING:
    from .pool import Pool

__all__ = ["PoolLoop", "Worker"]

_IDLE = 2.0  # seconds without work after which the thread ends (the next item starts it again)


class Worker(Protocol):
    """Work a pool's loop runs each round besides its steps and commands (see :meth:`PoolLoop.attach`)."""

    def take(self, messages: list[Any]) -> None:
        """What was given to :meth:`PoolLoop.post` since the last round, in order, in the loop's thread."""
        ...

    def pending(self) -> bool:
        """Something to run (read by the loop's thread only)."""
        ...

    def tick(self) -> None:
        """One tick, in the loop's thread, after the round's commands and steps; it handles its own errors."""
        ...


class _Item:
    __slots__ = ("args", "fn", "future", "loop", "sid", "since")

    def __init__(self, sid: Any, fn: Callable[..., Any] | None, args: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.sid, self.fn, self.args, self.loop = sid, fn, args, loop
        self.future: asyncio.Future = loop.create_future()
        self.since = time.perf_counter()


class PoolLoop:
    """The queue of a pool's steps and commands, and the thread that runs them."""

    def __init__(self, pool: Pool, max_batch: int, max_delay: float) -> None:
        if type(max_batch) is not int or max_batch < 1 or not max_delay >= 0:
            raise OrtStateError(f"max_batch must be >= 1 and max_delay >= 0, got {max_batch!r}, {max_delay!r}")
        self.pool = pool
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.on_commit: Callable[[dict[int, Any]], None] | None = None
        self._queue: deque[_Item] = deque()
        self._stepping: set[Any] = set()  # the streams of the queued steps
        self._calls = 0  # commands queued
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._nudged = False  # the event loop has run the coroutines that queued the items
        self._rounds = 0  # rounds run
        self._answered = 0  # the last round whose answers an event loop has handed out
        self._worker: Worker | None = None
        self._inbox: list[Any] = []  # messages for the worker, in order

    def attach(self, worker: Worker) -> None:
        """Give ``worker`` a tick each round while it is :meth:`~Worker.pending`, and the messages
        given to :meth:`post` (one worker per pool).

        Raises:
            OrtStateError: the pool has a worker already.
        """
        with self._wake:
            if self._worker is not None:
                raise OrtStateError("the pool already has a batcher: one ContinuousBatcher a pool")
            self._worker = worker

    def detach(self, worker: Worker) -> None:
        """Stop running ``worker`` (another may be attached after); messages not taken are dropped."""
        with self._wake:
            if self._worker is worker:
                self._worker, self._inbox = None, []

    def post(self, message: Any) -> None:
        """Queue ``message`` for the worker (from any thread): it takes it at the next round, in
        order with the others (starting the thread if it has ended).

        Raises:
            OrtStateError: no worker is attached.
        """
        with self._wake:
            if self._worker is None:
                raise OrtStateError("the pool has no batcher to take it")
            self._inbox.append(message)
            self._start()
            self._nudged = True
            self._wake.notify()

    def in_thread(self) -> bool:
        """Whether the caller is this loop's thread."""
        return threading.current_thread() is self._thread

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ortstate-pool", daemon=True)
            self._thread.start()

    def _working(self) -> bool:
        return bool(self._inbox) or (self._worker is not None and self._worker.pending())

    async def submit(self, sid: int, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Step stream ``sid`` once, batched with the other streams submitted in the same tick (at
        most one step of a stream per tick); its outputs, or its own error. (A pool's ``submit``.)"""
        return await self._put(_Item(sid, None, feeds, asyncio.get_running_loop()))

    async def call(self, fn: Callable[..., Any], /, *args: Any, sid: Any = None) -> Any:
        """``fn(*args)`` (e.g. ``pool.open``; ``pool.close, sid``) run in the loop's thread, between
        ticks: what an event loop calls instead of a pool method, so it never waits for a run it is
        not part of; what it returns or raises. (A pool's ``call``.)

        Args:
            sid: the stream it acts on (it runs after that stream's queued steps),
                :data:`~ortstate.scheduler.rounds.ALL` (after every queued step), or None (it
                touches no stream's state: at once).
        """
        return await self._put(_Item(sid, fn, args, asyncio.get_running_loop()))

    async def _put(self, item: _Item) -> Any:
        with self._wake:
            self._queue.append(item)
            if item.fn is None:
                self._stepping.add(item.sid)
            else:
                self._calls += 1
            self._start()
            if item.fn is not None or len(self._stepping) >= self.max_batch or len(self._queue) == 1:
                # once the coroutines ready now have run: what they submit together goes in one tick
                item.loop.call_soon(self._nudge)
        return await item.future

    def _nudge(self) -> None:
        with self._wake:
            self._nudged = True
            self._wake.notify()

    def _answered_round(self, round_no: int) -> None:
        """(On an event loop, after a round's answers and the coroutines they woke ran.)"""
        with self._wake:
            self._answered = max(self._answered, round_no)
            self._wake.notify()

    # -- the thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        busy = False
        while True:
            with self._wake:
                if not self._wait(busy):
                    self._thread = None
                    return
                items = list(self._queue)
                if items:
                    self._rounds += 1
                self._queue.clear()
                self._stepping.clear()
                self._calls = 0
                worker, messages, self._inbox = self._worker, self._inbox, []
            if worker is not None and messages:
                worker.take(messages)
            later: list[_Item] = []
            if items:
                try:
                    later = self._round(items)
                except BaseException as exc:  # noqa: BLE001 - a bug of ours: no caller waits forever
                    failed = OrtStateError(f"the pool's loop failed: {exc!r}")
                    _settle([(item, failed) for item in items], self._answered_round, self._rounds)
            if worker is not None and worker.pending():
                worker.tick()
            with self._wake:
                self._queue.extendleft(reversed(later))
                for item in later:
                    if item.fn is None:
                        self._stepping.add(item.sid)
                    else:
                        self._calls += 1
                busy = bool(self._queue)  # steps came in while it ran: the next tick runs at once

    def _wait(self, busy: bool) -> bool:
        """Wait (holding the condition) until the next round should run; False: idle, end."""
        if self._working():  # generation goes on tick after tick: steps queued meanwhile join at once
            return True
        if busy and self._queue:
            # the streams just answered submit their next steps as their coroutines run: wait for
            # that (a moment at most), so they make the next tick with the steps already queued
            self._wake.wait_for(lambda: self._answered >= self._rounds or self._working(), self.max_delay)
            return True
        while not self._queue or not self._nudged:  # a nudge for items an earlier round took: wait on
            self._nudged = False
            if not self._wake.wait_for(lambda: self._nudged, _IDLE):
                return self._working()
            if self._working():
                self._nudged = False
                return True
        self._nudged = False
        deadline = self._queue[0].since + self.max_delay
        while not self._working():
            left = deadline - time.perf_counter()
            if ready(self._calls, len(self._stepping), self.max_batch, left):
                break
            self._wake.wait(left)
        return True

    def _round(self, items: list[_Item]) -> list[_Item]:
        """Run ``items`` as :func:`~ortstate.scheduler.rounds.plan_round` orders them (commands in
        their place, steps gathered into ticks); the items left for the next round."""
        plan = plan_round([Queued(i.fn is not None, i.sid, i.future.done()) for i in items], self.max_batch)
        answers: list[tuple[_Item, Any]] = []
        done: list[tuple[_Item, Any]] = []  # since the last commit
        for action, at in plan.actions:
            if action == "tick":
                # run and committed before what follows: a command after it sees (and may save)
                # only steps that are acknowledged
                answers += self._commit(done, self._tick({items[k].sid: items[k] for k in at}, done))
                done = []
                continue
            item = items[at]
            try:
                done.append((item, item.fn(*item.args)))  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - the caller's own error
                done.append((item, exc))
        answers += self._commit(done, {})
        _settle(answers, self._answered_round, self._rounds)
        return [items[k] for k in plan.later]

    def _commit(self, done: list[tuple[_Item, Any]], results: dict[int, Any]) -> list[tuple[_Item, Any]]:
        """``on_commit(results)`` for the work ``done``; its answers (each the error, if it failed)."""
        if self.on_commit is None or not done:
            return done
        try:
            self.on_commit(results)
        except Exception as exc:  # noqa: BLE001 - none of it is acknowledged
            error = exc if isinstance(exc, OrtStateError) else OrtStateError(f"{type(exc).__name__}: {exc}")
            return [(item, error) for item, _ in done]
        return done

    def _tick(self, steps: dict[Any, _Item], done: list[tuple[_Item, Any]]) -> dict[int, Any]:
        feeds = {sid: item.args for sid, item in steps.items()}
        try:
            results = self.pool.step(feeds, "return")
        except Exception as exc:  # noqa: BLE001 - every step of the tick gets it
            results = dict.fromkeys(steps, exc)
        self.latencies.append(time.perf_counter() - min(item.since for item in steps.values()))
        done.extend((item, results[sid]) for sid, item in steps.items())
        return results


def _settle(done: list[tuple[_Item, Any]], after: Callable[[int], None], round_no: int) -> None:
    """Answer each item's future, on its own event loop (one callback per loop for the round); then,
    once the coroutines the answers woke have run, ``after(round_no)``."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Item, Any]]] = {}
    for item, result in done:
        by_loop.setdefault(item.loop, []).append((item, result))
    for loop, answers in by_loop.items():
        try:
            loop.call_soon_threadsafe(_answer, answers, after, round_no)
        except RuntimeError:  # its loop has closed: nobody waits any more
            pass


def _answer(answers: list[tuple[_Item, Any]], after: Callable[[int], None], round_no: int) -> None:
    for item, result in answers:
        if item.future.done():
            continue
        if isinstance(result, BaseException):
            item.future.set_exception(result)
        else:
            item.future.set_result(result)
    # scheduled after the wake-ups of the coroutines these answers woke: it runs once they have
    asyncio.get_running_loop().call_soon(after, round_no)

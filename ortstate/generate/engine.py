"""Continuous batching on a KV stream pool, as the pool's loop runs it: vLLM's engine core, without
a thread or a queue of its own.

Requests, cancels and the close come in through the pool's loop (:meth:`PoolLoop.post
<ortstate.streams.loop.PoolLoop.post>`), in order with the pool's other work; each round of the
loop, after the commands (``pool.call``: opening, saving or loading a kept stream) and the steps
submitted (``pool.submit``), the engine runs one tick: the scheduler
(:class:`~ortstate.scheduler.requests.Scheduler`: pure bookkeeping) decides from the requests'
progress alone who is admitted, who decodes and which prompt chunks are fed; the executor
(:mod:`.executor`) runs that plan on the pool and picks each request's next token; the tick's
tokens go to their requests' sinks in one place (:class:`~.delivery.Delivery`), as the next run
starts. Nothing on an event loop holds the pool's lock across a run.

Admission counts the pool's rows and its one KV budget (``KvPool.budget``): a request runs once
its rows are free and the positions it can reach fit beside those of the requests running, so a
tick never needs more KV memory than ``kv_cache_bytes``; the others wait in order.

With ``prefix_cache`` (on a pool whose streams' state is KV caches alone,
``KvPool.prefix_sharing``), the streams of the requests that ended stay open as the scheduler's
prefix cache, and a request starts from a copy of the longest start of its prompt a stream holds
(see :mod:`ortstate.scheduler.requests`); a kept stream's request continues its kept stream instead.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..decoders import FeedRules
from ..errors import OrtStateError, RunError
from ..scheduler.requests import Limits, Scheduler
from ..streams import KvPool
from .delivery import Delivery, Outbox
from .executor import Executor
from .request import END, Request

__all__ = ["Cancel", "Engine"]

_CLOSE = object()  # the message that closes the engine


@dataclass(frozen=True)
class Cancel:
    """The message that ends request ``rid`` (its sink gets :data:`~.request.END`)."""

    rid: int


@dataclass(frozen=True)
class _DropCache:
    """The message that closes the prefix cache's streams (``done`` set after)."""

    done: threading.Event


class Engine:
    """Generates for the requests posted to ``pool``'s loop, fed by ``rules`` (the pool's worker);
    ``prefix_cache``: where the pool's streams can share a prefix (see the module docstring)."""

    def __init__(self, pool: KvPool, rules: FeedRules, max_num_batched_tokens: int, prefix_cache: bool) -> None:
        # A decoder whose recurrent state reads one token per run once it holds a past (the mamba
        # family's decode path; transformers feeds it so): a kept stream's new tokens go one a tick.
        stepwise = rules.mask == "current" or rules.cache_position == "conv_kernel"
        chunked = pool.batching == "ragged" and rules.cache_position != "conv_kernel"
        self.prefix_cache = prefix_cache and pool.prefix_sharing and not stepwise
        limits = Limits(pool.slots, pool.budget.positions, max_num_batched_tokens, chunked, stepwise, self.prefix_cache)
        self.scheduler = Scheduler(limits)
        self.delivery = Delivery()
        self.executor = Executor(pool, rules, self.delivery, self.scheduler)
        self.worker = pool.worker
        self.closed = threading.Event()  # set once every request has ended, in the loop's thread
        self._closing = False
        self.worker.attach(self)

    # -- from any thread --------------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue ``request`` (and its siblings).

        Raises:
            OrtStateError: the engine is closed.
        """
        if self._closing:
            raise OrtStateError("the batcher is closed")
        self.worker.post(request)

    async def items(
        self, requests: list[Request], items: deque[Any], outbox: Outbox, tagged: bool
    ) -> AsyncIterator[Any]:
        """Submit a prompt's ``requests`` (its kept stream claimed), then the items their sinks put
        in ``items`` as ``outbox`` wakes this event loop (see :meth:`Outbox.received`); left early,
        those still running are cancelled."""
        kept = requests[0].kept
        if kept is not None:
            kept.claim()
        try:
            self.submit(requests[0])
        except BaseException:
            if kept is not None:
                kept.busy = False
            raise

        def cancel() -> None:
            for request in requests:
                self.cancel(request.rid)

        async with contextlib.aclosing(outbox.received(items, len(requests), tagged, cancel)) as received:
            async for entry in received:  # (closed with this generator: its requests cancelled)
                yield entry

    def cancel(self, rid: int) -> None:
        """End request ``rid`` at the next tick (nothing once the engine is closed)."""
        if not self._closing:
            try:
                self.worker.post(Cancel(rid))
            except OrtStateError:  # closed meanwhile: it has ended
                pass

    def counts(self) -> dict[str, int]:
        """Requests running and waiting, streams cached, prompt tokens fed so far (read without the
        pool's loop: a moment's values)."""
        executor, scheduler = self.executor, self.scheduler
        return {
            "running": scheduler.running,
            "waiting": scheduler.waiting,
            "cached": len(executor.cached),
            "prefilled": executor.prefilled,
        }

    def drop_cache(self) -> None:
        """Close the prefix cache's streams (the requests running keep theirs)."""
        if self.closed.is_set():  # (closing closed them)
            return
        if self.worker.in_thread():
            self.executor.drop_cache()
            return
        done = threading.Event()
        self.worker.post(_DropCache(done))
        done.wait()

    def close(self) -> None:
        """Stop generating; requests still running or waiting end with an error."""
        self._closing = True
        if self.worker.in_thread():  # from a sink or a command: at once
            self._shutdown()
        else:
            self.worker.post(_CLOSE)
            self.closed.wait()
        self.worker.detach(self)

    # -- the pool's loop ----------------------------------------------------------------------------
    def take(self, messages: list[Any]) -> None:
        for message in messages:
            if isinstance(message, Request):
                self._queue(message)
            elif isinstance(message, Cancel):
                self.executor.end(message.rid, END)
            elif isinstance(message, _DropCache):
                self.executor.drop_cache()
                message.done.set()
            elif message is _CLOSE:
                self._shutdown()

    def pending(self) -> bool:
        return bool(self.scheduler.waiting or self.scheduler.running or self.delivery.items)

    def tick(self) -> None:
        """One tick: the scheduler's plan run; the last tick's tokens go to their sinks before the
        runs (see :class:`~.delivery.Delivery`), or now when nothing runs."""
        try:
            self.executor.run(self.scheduler.schedule())
        except Exception as exc:  # noqa: BLE001 - every running request gets it; the loop goes on
            error = exc if isinstance(exc, OrtStateError) else RunError(f"generation failed: {exc}")
            self._end_all(error, list(self.scheduler.running_ids()))
        if not self.scheduler.running:
            self.delivery.flush()  # nothing runs next: hand over what the last tick made now

    def _queue(self, request: Request) -> None:
        """``request`` (and its other choices) to the scheduler; ended at once if the engine is closed."""
        self.executor.adopt(request)
        ids = [r.rid for r in (request, *request.siblings)]
        try:
            if self.closed.is_set():  # queued as the engine closed
                raise OrtStateError("the batcher was closed")
            matched = request.prompt if request.kept is None else None  # (a kept stream is continued)
            prompt, new = len(request.prompt), request.max_new_tokens
            self.scheduler.add(request.rid, prompt, new, request.reused, ids[1:], matched)
        except OrtStateError as exc:
            self._end_all(exc, ids)

    def _shutdown(self) -> None:
        if self.closed.is_set():
            return
        self._closing = True
        self._end_all(OrtStateError("the batcher was closed"), list(self.executor.requests))
        self.executor.drop_cache()
        self.delivery.flush()
        self.closed.set()

    def _end_all(self, error: OrtStateError, rids: list[int]) -> None:
        for rid in rids:
            self.executor.end(rid, error)

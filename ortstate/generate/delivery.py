"""Delivery, in one place: how a tick's items (tokens, ends, errors) reach their requests' sinks
(:class:`Delivery`, in the pool's loop), and how the ``stream()`` consumers of one event loop are
woken (:class:`Outbox`, one wake a tick for all of them)."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from .request import END, Request

__all__ = ["Delivery", "Outbox", "Outboxes", "tag"]


class Delivery:
    """The items of the last tick, for their requests' sinks.

    The executor appends ``(request, item)`` to :attr:`items` as it picks tokens and ends requests;
    :meth:`flush` hands them over. The pool calls it (``before_run``) once the next run's inputs are
    bound, as the last Python before the run (the engine calls it when nothing runs next): a sink
    that wakes another thread (``stream()``'s event loop) wakes it as ONNX Runtime lets go of the
    GIL, so that thread's work overlaps the run. Woken earlier, while the pool's loop still builds
    and binds the run's feeds, the two take turns at the GIL and a tick costs both (tiny llama, 64
    ``stream()`` consumers: 8.8x one stream at a time when woken before the pool's checks and
    binding, 10.3-10.9x as the last thing)."""

    def __init__(self) -> None:
        self.items: list[tuple[Request, Any]] = []

    def flush(self) -> None:
        """Hand the items to their sinks, then call each ``notify`` once for the requests sharing it."""
        if not self.items:
            return
        items = self.items[:]
        self.items.clear()  # (the executor keeps this list: cleared, never replaced)
        notify: set[Callable[[], None]] = set()
        last = None
        for request, item in items:
            try:
                request.sink(item)
            except Exception:  # noqa: BLE001 - a sink that fails is its own consumer's problem
                pass
            if request.notify is not last:  # neighbours share one (one event loop's streams): no hash
                last = request.notify
                if last is not None:
                    notify.add(last)
        for wake in notify:  # once for the requests that share it
            try:
                wake()
            except Exception:  # noqa: BLE001
                pass


class Outbox:
    """How the pool's loop hands tokens to the ``stream()`` consumers of one event loop.

    Each request's sink is its consumer's deque's own ``append`` (a C call, no Python frame:
    :meth:`Delivery.flush` hands a tick's tokens over in one loop). Then it calls the requests'
    ``notify`` once for all of them (:meth:`wake`): one ``call_soon_threadsafe`` a tick for every stream of the
    loop, not one a token. Each is a write to the loop's self-pipe, which lets go of the GIL: the
    woken loop takes it, and the two threads would trade it back and forth all through the tick.
    On the loop, :meth:`drain` wakes each consumer waiting whose deque has items.

    One thread appends (the pool's loop) and one pops (the event loop's); a deque's appends and pops are
    atomic, so no lock. The drain clears ``armed`` before it looks, so a wake after it looked
    schedules the next drain; a consumer looks at its deque before it waits, so items appended
    before it waits are seen, and those appended after are followed by a wake."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)  # the batcher's map of outboxes must not keep a loop alive
        self.armed = False  # a drain is scheduled and has not started
        # the consumers waiting, by their deque's id: (deque, future)
        self.waiting: dict[int, tuple[deque[Any], asyncio.Future[None]]] = {}

    def wake(self) -> None:
        if self.armed:
            return
        self.armed = True
        loop = self.loop()
        try:
            if loop is None:
                raise RuntimeError("the event loop is gone")
            loop.call_soon_threadsafe(self.drain)
        except RuntimeError:  # the consumer's event loop is closed: nobody is reading any more
            self.waiting.clear()

    async def received(
        self, items: deque[Any], requests: int, tagged: bool, cancel: Callable[[], None]
    ) -> AsyncIterator[Any]:
        """The items ``requests`` requests append to ``items`` (``tagged``: as ``(choice, item)``)
        until each has ended (:data:`~.request.END`); an error ends them (raised here). Left early
        (closed, cancelled, the loop gone): ``cancel()`` ends those still running."""
        loop, key, left = asyncio.get_running_loop(), id(items), requests
        try:
            while True:
                while not items:  # one future a wait, awaited here: no coroutine between
                    waiter = loop.create_future()
                    self.waiting[key] = (items, waiter)  # the drain takes it out as it wakes us
                    await waiter
                entry = items.popleft()
                item = entry[1] if tagged else entry
                if item is END:
                    left -= 1
                    if not left:
                        return
                    continue
                if isinstance(item, BaseException):
                    left -= 1  # its request ended; the other choices' are cancelled
                    raise item
                yield entry
        finally:
            self.waiting.pop(key, None)  # left while waiting (cancelled, or the loop closed)
            if left:
                cancel()

    def drain(self) -> None:
        self.armed = False
        ready = [key for key, (items, _) in self.waiting.items() if items]
        for key in ready:
            waiter = self.waiting.pop(key)[1]
            if not waiter.done():
                waiter.set_result(None)


class Outboxes:
    """One :class:`Outbox` per event loop (held weakly: a closed loop's goes with it)."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Outbox] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, loop: asyncio.AbstractEventLoop) -> Outbox:
        with self._lock:
            outbox = self._by_loop.get(loop)
            if outbox is None:
                outbox = self._by_loop[loop] = Outbox(loop)
            return outbox


def tag(append: Callable[[Any], None], index: int, item: Any) -> None:
    """A choice's sink: its items as ``(index, item)``."""
    append((index, item))

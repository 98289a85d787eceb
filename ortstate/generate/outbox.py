"""How the engine's thread hands a generation's tokens to the ``stream()`` consumers of one event
loop (:meth:`~.continuous.ContinuousBatcher.stream`): one wake a tick for all of them."""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from typing import Any

__all__ = ["Outbox"]


class Outbox:
    """How the engine's thread hands tokens to the ``stream()`` consumers of one event loop.

    Each request's sink is its consumer's deque's own ``append`` (a C call, no Python frame: the
    engine hands a tick's tokens over in one loop). Then the engine calls the requests' ``notify``
    once for all of them (:meth:`wake`): one ``call_soon_threadsafe`` a tick for every stream of the
    loop, not one a token. Each is a write to the loop's self-pipe, which lets go of the GIL: the
    woken loop takes it, and the two threads would trade it back and forth all through the tick.
    On the loop, :meth:`drain` wakes each consumer waiting whose deque has items.

    One thread appends (the engine's) and one pops (the loop's); a deque's appends and pops are
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

    def drain(self) -> None:
        self.armed = False
        ready = [key for key, (items, _) in self.waiting.items() if items]
        for key in ready:
            waiter = self.waiting.pop(key)[1]
            if not waiter.done():
                waiter.set_result(None)

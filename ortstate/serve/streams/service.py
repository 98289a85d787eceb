"""The streams a server holds: public ids over one :class:`~ortstate.streams.SlotPool`, parking to
a state directory and resuming from it, and what ``/v1/stats`` and ``/v1/model`` report.

A stream's public id is 128 random bits, URL-safe: the capability to use it. Every open stream, in
memory or parked, holds one of the pool's slots, so a parked stream can always come back; a new
stream beyond ``slots`` is refused, none is ever evicted. A parked stream is a snapshot file named
by its id in the state directory: a server started again on that directory finds it there.

With ``shared=True`` (servers behind one router, Ray Serve's replicas) the state directory belongs
to all of them: a new stream is parked there at once, a stream not in memory is looked for there
(restored on a miss), and a parked file is claimed by renaming it, so only one server takes it.
Then only the streams in memory hold slots. Otherwise the directory is this service's alone, locked
(:mod:`ortstate.serve.state_dir`) until :meth:`StreamService.release`; its files and log: :mod:`.parked_files`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import OrtStateError, PoolFullError, ServeError
from ...streams import SlotPool
from ..log_format import CLOSED, LIVE
from .ids import new_id
from .journal import Journal, refuse_kv
from .parked_files import ParkedFiles
from .reports import model_report, pool_report

__all__ = ["CLOSE_FULL", "CLOSE_UNKNOWN", "StreamService"]

CLOSE_UNKNOWN = 4404  # no such stream (never created by a connection)
CLOSE_FULL = 4503  # no slot for the stream: the server holds --max-streams streams
CLOSE_BROKEN = 4500  # the stream's parked state cannot be read back
_KEPT = 4096  # step latencies kept for the percentiles
logger = logging.getLogger("ortstate.serve")


class StreamService:
    """Streams by public id over ``pool``; with ``state_dir``, parked there and found there again."""

    def __init__(
        self,
        pool: SlotPool,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        shared: bool = False,
        durable: bool = False,
    ) -> None:
        if shared and state_dir is None:
            raise ServeError("servers that share their streams need a state directory they all reach")
        if durable and state_dir is None:
            raise ServeError("--durable needs --state-dir: the log is kept there")
        if durable:
            refuse_kv(pool)
        self.pool = pool
        self.state_dir = None if state_dir is None else Path(state_dir)
        self.shared = shared
        self.name = f"{socket.gethostname()}:{os.getpid()}"  # which server holds a stream
        self._sid: dict[str, int] = {}  # in the pool
        self._parked: set[str] = set()  # in state_dir
        self._locks: dict[str, asyncio.Lock] = {}
        self._last: dict[str, float] = {}
        self._sockets: dict[str, Any] = {}
        self._latencies: deque[float] = deque(maxlen=_KEPT)
        self._steps: dict[str, int] = {}  # steps made since the stream was opened (a journal's, if durable)
        self.steps = 0
        self.errors = 0
        self.draining = False  # shutting down: no new message is taken
        self.in_flight = 0  # messages taken and not yet answered
        self.lost: dict[str, str] = {}  # streams park_all could not park: why
        self.files: ParkedFiles | None = None
        if self.state_dir is not None:
            self.files = ParkedFiles(pool, self.state_dir, self.name.replace(":", "-"), shared=shared, durable=durable)
            self._parked.update(self.files.found)
        self.journal: Journal | None = None if self.files is None else self.files.journal

    def release(self) -> None:
        """Let go of the state directory (another server may take it): once the server has stopped."""
        if self.files is not None:
            self.files.release(remove_log=not self._sid)

    # -- streams ----------------------------------------------------------------------------------
    @property
    def max_streams(self) -> int:
        return self.pool.slots

    async def open(self) -> str:
        """A new stream at the model's initial state; its id.

        Raises:
            ServeError: (503) the server holds ``max_streams`` streams already.
        """
        held = len(self._sid) + len(self._parked)  # shared: only those in memory hold a slot
        if held >= self.max_streams:
            raise ServeError(self._full_message(held), 503)
        name = new_id()
        while name in self._parked or name in self._sid:  # 2**-128: never, but cheap to be sure
            name = new_id()
        try:
            sid = await self.pool.call(self._opened, name)
        except PoolFullError:
            raise ServeError(self._full_message(held), 503) from None
        self._sid[name] = sid
        self._steps[name] = 0
        self._last[name] = time.monotonic()
        if self.shared:  # whichever server its id is routed to restores it from there
            await self._park_now(name)
        return name

    def _opened(self, name: str) -> int:
        """(In the pool's thread.) Open a stream for ``name``, logged if durable."""
        sid = self.pool.open()
        if self.journal is not None:
            self.journal.bind(name, sid)
            self.journal.note(name, LIVE, sid)
        return sid

    def knows(self, stream: str) -> bool:
        if stream in self._sid or stream in self._parked:
            return True
        if not self.shared:
            return False
        assert self.files is not None  # shared: there is a state directory
        if not self.files.file(stream).is_file() and self.journal is not None:
            self.files.recover_orphans()  # its server may have died: its log says
        return self.files.file(stream).is_file()

    def steps_of(self, stream: str) -> int | None:
        """How many steps ``stream`` has made since it was opened; None where that is not known
        here (a server sharing its streams, after another held it; a restart without ``--durable``)."""
        steps = self._steps.get(stream)
        if steps is None and stream not in self._sid and self.files is not None:
            steps = self.files.parking.steps(self.files.file(stream))
        return steps

    async def last(self, stream: str) -> dict[str, np.ndarray]:
        """The outputs of ``stream``'s last step, as logged (``--durable`` only): the reply a client
        lost when the server stopped after making the step and before answering it.

        Raises:
            ServeError: not durable, or no step made yet.
        """
        if self.journal is None:
            raise ServeError("only a --durable server keeps a stream's last reply")
        async with self._lock(stream):
            await self._resident(stream)
        outputs = self.journal.last(stream)
        if outputs is None:
            raise ServeError("the stream has made no step yet")
        return outputs

    def where(self, stream: str) -> str | None:
        """``memory`` or ``parked`` (None: no such stream)."""
        if stream in self._sid:
            return "memory"
        return "parked" if self.knows(stream) else None

    async def step(self, stream: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Step ``stream`` once, batched with the other streams stepping in the same tick.

        Raises:
            ServeError: the feeds do not fit the model (code 0: the stream is unchanged), or the
                stream is gone or cannot be brought back (a close code).
        """
        async with self._lock(stream):
            sid = await self._resident(stream)
            start = time.perf_counter()
            try:
                outputs = await self.pool.submit(sid, feeds)
            except OrtStateError as exc:
                self.errors += 1
                raise ServeError(str(exc).removeprefix(f"stream {sid}: ")) from None
            self._latencies.append(time.perf_counter() - start)
            if stream in self._steps:
                self._steps[stream] += 1
            self.steps += 1
            self._last[stream] = time.monotonic()
            return outputs

    async def reset(self, stream: str) -> None:
        async with self._lock(stream):
            sid = await self._resident(stream)
            await self.pool.call(self._reset, stream, sid, sid=sid)
            self._last[stream] = time.monotonic()

    def _reset(self, stream: str, sid: int) -> None:
        self.pool.reset(sid)
        if self.journal is not None:
            self.journal.note(stream, LIVE, sid)

    async def close(self, stream: str) -> None:
        """End ``stream``: its slot and its parked file are freed, its id unknown from now on."""
        async with self._lock(stream):
            if stream in self._sid:
                sid = self._sid[stream]
                await self.pool.call(self._close, stream, sid, sid=sid)
                del self._sid[stream]
            elif stream in self._parked or self.shared:
                if self.journal is not None:
                    await self.pool.call(self._close, stream, None)
                self._parked.discard(stream)
                claimed = self._claim(stream)
                if claimed is not None:
                    claimed.unlink()
            self._last.pop(stream, None)
            self._steps.pop(stream, None)
        self._locks.pop(stream, None)

    def _close(self, stream: str, sid: int | None) -> None:
        if sid is not None:
            self.pool.close(sid)
        if self.journal is not None:
            self.journal.note(stream, CLOSED, sid)

    # -- parking ----------------------------------------------------------------------------------
    async def park(self, stream: str) -> bool:
        """Move ``stream``'s state to its file in the state directory and free its pool row;
        False without a state directory or when it is not in memory."""
        if self.files is None:
            return False
        async with self._lock(stream):
            if stream not in self._sid:
                return False
            await self._park_now(stream)
            return True

    async def _park_now(self, stream: str) -> None:
        assert self.files is not None
        sid = self._sid[stream]
        written = await self.files.park(stream, sid)
        del self._sid[stream]
        self.files.parking.publish(written, self.files.file(stream))
        if self.shared:
            self._steps.pop(stream, None)  # another server may step it now
        else:
            self._parked.add(stream)

    async def park_idle(self, seconds: float) -> list[str]:
        """Park the streams in memory that have not stepped for ``seconds`` and are not stepping."""
        since = time.monotonic() - seconds
        idle = [s for s in self._sid if self._last.get(s, 0.0) <= since and not self._lock(s).locked()]
        return [s for s in idle if await self.park(s)]

    async def park_all(self) -> int:
        """Park every stream in memory that can be (at shutdown); how many were parked. One that
        cannot be (a full disk) is named in the log, once, and in :attr:`lost`, and stays in memory."""
        parked = 0
        for stream in list(self._sid):
            try:
                parked += await self.park(stream)
            except Exception as exc:  # noqa: BLE001 - the other streams are parked all the same
                why = str(exc) if isinstance(exc, OrtStateError) else f"{type(exc).__name__}: {exc}"
                if stream not in self.lost:
                    logger.error("ortstate serve: stream %s cannot be parked, its state is lost: %s", stream, why)
                self.lost[stream] = why
            else:
                self.lost.pop(stream, None)
        return parked

    async def drain(self, timeout: float) -> None:
        """Take no new message, and wait (up to ``timeout`` seconds) until every message taken has
        been answered: a step a client got no reply to was not made."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def _resident(self, stream: str) -> int:
        """``stream``'s pool id, loading it back from its file if it is parked."""
        sid = self._sid.get(stream)
        if sid is not None:
            return sid
        claimed = self._claim(stream) if stream in self._parked or self.shared else None
        if claimed is None:
            raise ServeError("no such stream (closed, or never opened here)", CLOSE_UNKNOWN)
        assert self.files is not None
        try:
            sid, steps = await self.pool.call(self.files.parking.load, stream, claimed)
        except OrtStateError as exc:
            claimed.rename(self.files.file(stream))  # not taken: it stays parked
            if isinstance(exc, PoolFullError):
                raise ServeError(self._full_message(len(self._sid)), CLOSE_FULL) from None
            raise ServeError(f"the stream's parked state cannot be read back: {exc}", CLOSE_BROKEN) from None
        claimed.unlink()
        self._parked.discard(stream)
        if steps is not None:
            self._steps[stream] = steps
        self._sid[stream] = sid
        self._last[stream] = time.monotonic()
        return sid

    def _claim(self, stream: str) -> Path | None:
        """``stream``'s parked file, taken for this server; None if there is none."""
        return None if self.files is None else self.files.claim(stream)

    def _lock(self, stream: str) -> asyncio.Lock:
        lock = self._locks.get(stream)
        if lock is None:
            lock = self._locks[stream] = asyncio.Lock()
        return lock

    def _full_message(self, held: int) -> str:
        return (
            f"server full: it holds {held} of --max-streams {self.max_streams} streams; "
            "a stream is freed when its client closes it"
        )

    # -- connections ------------------------------------------------------------------------------
    def attach(self, stream: str, socket: Any) -> Any:
        """Make ``socket`` the one connection of ``stream``; the one it replaces, or None."""
        previous = self._sockets.get(stream)
        self._sockets[stream] = socket
        return previous

    def detach(self, stream: str, socket: Any) -> bool:
        """``socket`` is no longer ``stream``'s connection; True if the stream has none now."""
        if self._sockets.get(stream) is socket:
            del self._sockets[stream]
        return stream not in self._sockets

    # -- reports ----------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        parked = len(self._parked) if self.files is None or not self.shared else self.files.count()
        return {
            "streams_open": len(self._sid) + parked,
            "streams_parked": parked,
            "streams_in_memory": len(self._sid),
            "connections": len(self._sockets),
            "max_streams": self.max_streams,
            "server": self.name,
            "steps": self.steps,
            "errors": self.errors,
            **pool_report(self.pool, self._latencies),
        }

    def model(self) -> dict[str, Any]:
        """The model as one stream feeds it (:func:`~.reports.model_report`)."""
        return model_report(self.pool)

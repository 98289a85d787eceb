"""Every connection under deadlines, and no connection able to keep the others out.

uvicorn gives a connection no deadline before its first request nor for any request's body, counts
every open connection against ``limit_concurrency`` (a connection idle between requests, or
dripping a body, holds its place for as long as it likes) and refuses in plain text. Here, with a
few of uvicorn's httptools protocol's callbacks extended:

- **Deadlines, on every request** (:class:`Deadlines`): its line and headers within ``headers``
  seconds of its first byte (a new connection's first request: of connecting), at most
  :data:`MAX_HEADER_BYTES` (431); its body within ``body`` seconds of its headers; a kept-alive
  connection idle between requests ``idle`` seconds at most. A request late with its headers or body
  is answered 408 and its connection closed (closed without an answer if nothing came, or if an
  answer had begun). A request being answered (its body whole) has no deadline here: its answer
  takes what it takes, as long as the client takes it: an answer the client stops reading (the
  server's buffer for it full, ``write`` seconds without room) is cut and its connection closed,
  so a client that stops reading a stream holds its place no longer.
- **Unproven connections**, those yet to send a request whose headers carry the token (without a
  token: yet to send a request's headers), are counted apart: at most :data:`MAX_UNPROVEN`, a new
  one closes the oldest.
- **Proven connections** are uvicorn's, ``limit`` at most. One that is not being answered (idle
  between requests, or sending its next request) keeps its place only until a new connection needs
  it: when one proves itself with ``limit`` open, the one waiting longest is closed. A place is
  held for good only while a whole request is answered, and by a WebSocket (uvicorn never refuses
  one; the stream server bounds them by its streams). When every place is held so, a new request is
  answered 503 with the server's JSON body and ``Retry-After``, and its connection closed.

Every answer the guard gives itself (408, 431, 503, and the 400 of a request httptools cannot parse,
which uvicorn answers in plain text) is JSON in the server's error shape (``error_body``).

So a socket that connects and sends nothing, drips its headers or its body, or sits between
requests holds nothing another client needs for longer than a deadline, and a place no longer than
until another client needs it. uvicorn offers no header limit for httptools
(``h11_max_incomplete_event_size`` is h11's).
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..errors import ServeError

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_UNPROVEN",
    "RETRY_AFTER",
    "Deadlines",
    "Guard",
    "stream_error_body",
]

MAX_HEADER_BYTES = 64 * 1024  # a request line and headers (what came with them included)
MAX_UNPROVEN = 1024  # connections yet to show a token: beyond, the oldest is closed
RETRY_AFTER = b"1"  # seconds, on a 503: a place frees as soon as one answer ends
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
_SAID = {  # what the guard's own answers say
    400: "the request is not valid HTTP/1.1",
    408: "the request was not sent in time (its headers within {headers:g} s, its body within {body:g} s)",
    431: f"the request line and headers are over {MAX_HEADER_BYTES} bytes",
    503: "server full: every connection is being answered; try again later",
}


def stream_error_body(status: int, message: str) -> bytes:
    """The stream server's error body: ``{"error": message}``."""
    return json.dumps({"error": message}).encode()


def _raw(status: int, body: bytes) -> bytes:
    """A whole HTTP response of JSON ``body`` that closes its connection."""
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
    return head % (status, _REASONS[status], len(body)) + body


@dataclass(frozen=True)
class Deadlines:
    """How long a connection may take, in seconds, at each point of a request (see the module).

    Raises:
        ServeError: a deadline that is not a positive number.
    """

    headers: float = 5.0  # a request's line and headers, from its first byte (a new connection: from connecting)
    body: float = 10.0  # its body, from the end of its headers
    idle: float = 5.0  # a kept-alive connection between requests
    write: float = 30.0  # an answer the client takes nothing of, the server's buffer for it full

    def __post_init__(self) -> None:
        for name in ("headers", "body", "idle", "write"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ServeError(f"the {name} deadline must be a positive number of seconds, got {value!r}")


class _Phase(enum.Enum):
    HEADERS = "headers"  # a request's line and headers are coming
    BODY = "body"  # its body is coming
    ANSWERING = "answering"  # it is whole: the server answers it
    IDLE = "idle"  # between requests


class Guard:
    """One server's connections as the module describes: its deadlines, the unproven connections
    (oldest first), the proven ones not being answered (longest waiting first), and what was done.

    Args:
        limit: proven connections at most (uvicorn's, WebSockets included).
        error_body: the server's JSON error body for a status and a message (the guard's own
            answers: 400, 408, 431, 503); default :func:`stream_error_body`.

    Attributes:
        closed_late: connections closed at a deadline.
        closed_oldest: unproven connections closed to make room for a new one.
        closed_waiting: proven connections not being answered closed to make room for a new one.
        closed_large: connections closed for headers over :data:`MAX_HEADER_BYTES`.
        closed_unread: connections closed for an answer their client stopped reading.
        refused_full: requests answered 503, every place held.
    """

    def __init__(
        self,
        token: str | None,
        limit: int,
        *,
        deadlines: Deadlines | None = None,
        error_body: Callable[[int, str], bytes] | None = None,
        max_unproven: int = MAX_UNPROVEN,
    ) -> None:
        self.expected = None if token is None else f"Bearer {token}".encode()
        self.limit = limit
        self.deadlines = deadlines or Deadlines()
        said = error_body or stream_error_body
        d = self.deadlines
        self.full_body = said(503, _SAID[503])
        self.answers = {
            status: _raw(status, said(status, _SAID[status].format(headers=d.headers, body=d.body)))
            for status in (400, 408, 431)
        }
        self.max_unproven = max_unproven
        self.unproven: dict[GuardedProtocol, None] = {}
        self.waiting: dict[GuardedProtocol, None] = {}
        self.closed_late = self.closed_oldest = self.closed_waiting = self.closed_large = self.refused_full = 0
        self.closed_unread = 0

    def protocol(self) -> type[GuardedProtocol]:
        """The protocol class uvicorn makes each connection's protocol from (``http=``)."""
        return type("GuardedProtocol", (GuardedProtocol,), {"guard": self})

    def admit(self, connection: GuardedProtocol) -> None:
        while len(self.unproven) >= self.max_unproven:
            oldest = next(iter(self.unproven))
            del self.unproven[oldest]
            self.closed_oldest += 1
            oldest.transport.close()
        self.unproven[connection] = None

    def proves(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether a request with ``headers`` (names lower-cased) shows the token."""
        if self.expected is None:
            return True
        given = [v for k, v in headers if k == b"authorization"]
        return len(given) == 1 and hmac.compare_digest(given[0], self.expected)

    def make_room(self, proven: set[Any]) -> bool:
        """Whether ``proven`` (uvicorn's connections) has room for one more, once connections not
        being answered are closed for it, longest waiting first."""
        while len(proven) >= self.limit and self.waiting:
            self.closed_waiting += 1
            next(iter(self.waiting)).close_for_room()
        return len(proven) < self.limit

    async def full(self, scope: Any, receive: Any, send: Any) -> None:
        """The ASGI app a request is given when every place is held: 503, ``Retry-After``, closed."""
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.full_body)).encode()),
            (b"retry-after", RETRY_AFTER),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": self.full_body})

    def close_all(self) -> None:
        """Close every connection not being answered (at shutdown: uvicorn would wait for one
        sending a body until its graceful shutdown runs out; it closes the others it counts)."""
        for connection in [*self.unproven, *self.waiting]:
            connection.transport.close()
        self.unproven.clear()
        self.waiting.clear()


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under a :class:`Guard` (set on the subclass
    :meth:`Guard.protocol` makes)."""

    guard: Guard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._unread: asyncio.TimerHandle | None = None  # the answer's buffer is full since
        self._phase = _Phase.HEADERS
        self._header_bytes = 0
        self._answering: set[Any] = set()  # cycles whose request is whole and whose answer is not

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.connections.discard(self)  # uvicorn counts it once it proves itself
        self.guard.admit(self)
        self._expect(_Phase.HEADERS)

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        self._reading_again()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        """The transport's buffer is full: the client has ``write`` seconds to take some of it."""
        super().pause_writing()
        if self._unread is None:
            self._unread = self.loop.call_later(self.guard.deadlines.write, self._not_reading)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._reading_again()

    def _reading_again(self) -> None:
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None

    def _not_reading(self) -> None:
        """Cut an answer its client stopped taking: aborted, not closed (a close waits for the
        buffer to be sent); the app sees the client gone and ends the answer, giving back its place."""
        self._unread = None
        self.guard.closed_unread += 1
        self._forget()
        self.connections.discard(self)
        self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._phase in (_Phase.IDLE, _Phase.ANSWERING):
            self._expect(_Phase.HEADERS)  # the next request begins (uvicorn's keep-alive timer stops)
        if self._phase is _Phase.HEADERS:
            # counted up to their end, before the parser sees them: headers that come whole in one
            # piece leave this phase in the parser's callbacks, and were not counted once past
            end = data.find(b"\r\n\r\n")
            self._header_bytes += len(data) if end < 0 else end + 4
            if self._header_bytes > MAX_HEADER_BYTES:
                self.guard.closed_large += 1
                self._refuse(self.guard.answers[431])
                return
        super().data_received(data)

    def on_message_begin(self) -> None:
        if self._phase is not _Phase.HEADERS:  # a pipelined request, begun in the data of the one before
            self._expect(_Phase.HEADERS)
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._expect(_Phase.BODY)
        app = self.app
        if self in self.guard.unproven and self.guard.proves(self.headers):
            del self.guard.unproven[self]
            if self.guard.make_room(self.connections) or self.parser.should_upgrade():
                self.connections.add(self)
                self.guard.waiting[self] = None
            else:  # every place is held: this request is refused, and its connection closed
                self.guard.refused_full += 1
                self.app = self.guard.full
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self.cycle is not None and not self.cycle.response_complete:
            self._answering.add(self.cycle)
            self.guard.waiting.pop(self, None)
            self._phase = _Phase.ANSWERING
            self._disarm()
        else:  # answered before its body ended (401, 413): idle now
            self._expect(_Phase.IDLE)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._answering = {cycle for cycle in self._answering if not cycle.response_complete}
        if self._answering or self.transport.is_closing():
            return
        if self._phase is _Phase.ANSWERING:
            self._expect(_Phase.IDLE)
        if self in self.connections:  # waiting again, last in line
            self.guard.waiting.pop(self, None)
            self.guard.waiting[self] = None

    def handle_websocket_upgrade(self) -> None:
        self._forget()  # the WebSocket protocol takes the transport: uvicorn counts it
        super().handle_websocket_upgrade()

    def close_for_room(self) -> None:
        """Close this connection, not being answered, for a new one (:meth:`Guard.make_room`)."""
        self._forget()
        self.connections.discard(self)  # now: the room is counted before the socket is gone
        self.transport.close()

    def _expect(self, phase: _Phase) -> None:
        self._disarm()
        self._phase = phase
        self._header_bytes = 0
        d = self.guard.deadlines
        seconds = d.headers if phase is _Phase.HEADERS else d.body if phase is _Phase.BODY else d.idle
        self._deadline = self.loop.call_later(seconds, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _forget(self) -> None:
        self._disarm()
        self.guard.unproven.pop(self, None)
        self.guard.waiting.pop(self, None)

    def _late(self) -> None:
        self._deadline = None
        self.guard.closed_late += 1
        begun = self._phase is _Phase.BODY or (self._phase is _Phase.HEADERS and self._header_bytes > 0)
        self._refuse(self.guard.answers[408] if begun else b"")

    def send_400_response(self, msg: str) -> None:
        """A request httptools cannot parse: 400 in the server's JSON (uvicorn's is plain text)."""
        self._refuse(self.guard.answers[400])

    def _refuse(self, response: bytes) -> None:
        self._forget()
        self.connections.discard(self)
        if not self.transport.is_closing():
            # a request's cycle is made once its headers are whole: before, self.cycle is the last one's
            answered = self._answering or (
                self._phase is _Phase.BODY and self.cycle is not None and self.cycle.response_started
            )
            if response and not answered:
                self.transport.write(response)
            self.transport.close()

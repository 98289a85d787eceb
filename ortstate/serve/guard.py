"""Connections that have not yet shown who they are, kept apart from those that have.

uvicorn counts every open connection against ``limit_concurrency`` and gives none a deadline before
its first request, so a few thousand sockets that connect and send nothing (or drip header lines)
make every request answer 503, authorised ones included. Here a connection is *unproven* until a
request's headers are complete and carry the token (any complete request, without a token): only
then is it one of uvicorn's connections and counted against its limit. Unproven connections are
counted apart, at most :data:`MAX_UNPROVEN` (a new one closes the oldest), and each has a deadline:
its first request whole within :data:`FIRST_REQUEST_SECONDS`, each later request's headers within
:data:`HEADERS_SECONDS` of their first byte (uvicorn's keep-alive timeout closes an idle connection
between requests), headers of :data:`MAX_HEADER_BYTES` at most.

This is uvicorn's httptools protocol with a few of its callbacks extended; uvicorn offers no
deadline before a first request (``timeout_keep_alive`` starts after a response) and no header
limit for httptools (``h11_max_incomplete_event_size`` is h11's).
"""

from __future__ import annotations

import asyncio
import hmac
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..errors import ServeError

__all__ = [
    "FIRST_REQUEST_SECONDS",
    "HEADERS_SECONDS",
    "MAX_HEADER_BYTES",
    "MAX_UNPROVEN",
    "Guard",
    "raise_open_files",
]

FIRST_REQUEST_SECONDS = 5.0  # a new connection's first request, headers and body
HEADERS_SECONDS = 5.0  # each later request's headers, from their first byte
MAX_HEADER_BYTES = 64 * 1024  # a request line and headers (what came with them included)
MAX_UNPROVEN = 1024  # connections yet to show a token: beyond, the oldest is closed
_SPARE_FILES = 256  # besides connections: the model, parked states, ONNX Runtime, Python's own
_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class Guard:
    """One server's unproven connections (oldest first) and what was done to them.

    Attributes:
        closed_late: connections closed at a deadline.
        closed_oldest: unproven connections closed to make room for a new one.
        closed_large: connections closed for headers over :data:`MAX_HEADER_BYTES`.
    """

    def __init__(self, token: str | None, max_unproven: int = MAX_UNPROVEN) -> None:
        self.expected = None if token is None else f"Bearer {token}".encode()
        self.max_unproven = max_unproven
        self.unproven: dict[GuardedProtocol, None] = {}
        self.closed_late = self.closed_oldest = self.closed_large = 0

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

    def close_all(self) -> None:
        """Close every unproven connection (at shutdown: uvicorn closes the ones it counts)."""
        for connection in list(self.unproven):
            connection.transport.close()
        self.unproven.clear()


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under a :class:`Guard` (set on the subclass
    :meth:`Guard.protocol` makes)."""

    guard: Guard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._first = True  # no request complete yet: the deadline runs to the first one's end
        self._heading = False  # a request's headers are awaited
        self._header_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.connections.discard(self)  # uvicorn counts it once it proves itself
        self.guard.admit(self)
        self._arm(FIRST_REQUEST_SECONDS)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.unproven.pop(self, None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._heading and (self.cycle is None or self.cycle.response_complete):
            self._arm(HEADERS_SECONDS)  # the next request begins (uvicorn's keep-alive timer stops)
        if self._heading:
            self._header_bytes += len(data)
        super().data_received(data)
        if self._heading and self._header_bytes > MAX_HEADER_BYTES:
            self.guard.closed_large += 1
            self._refuse(_TOO_LARGE)

    def on_message_begin(self) -> None:
        if not self._heading:  # a pipelined request, begun in the data of the one before
            self._arm(HEADERS_SECONDS)
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._heading = False
        if not self._first:
            self._disarm()
        if self in self.guard.unproven and self.guard.proves(self.headers):
            del self.guard.unproven[self]
            self.connections.add(self)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self._first:
            self._first = False
            self._disarm()
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the WebSocket protocol takes the transport: it counts itself
        self.guard.unproven.pop(self, None)
        super().handle_websocket_upgrade()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._heading = True
        self._header_bytes = 0
        self._deadline = self.loop.call_later(seconds, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        self.guard.closed_late += 1
        self._refuse(_TIMEOUT if self._header_bytes or not self._heading else b"")

    def _refuse(self, response: bytes) -> None:
        self._disarm()
        self.guard.unproven.pop(self, None)
        if not self.transport.is_closing():
            if response and (self.cycle is None or not self.cycle.response_started):
                self.transport.write(response)
            self.transport.close()


def raise_open_files(connections: int) -> int:
    """Raise this process's limit of open files (the soft limit, up to the hard one) to what
    ``connections`` proven connections, :data:`MAX_UNPROVEN` unproven ones and a few files need;
    the limit now.

    Raises:
        ServeError: the hard limit is below that.
    """
    needed = connections + MAX_UNPROVEN + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        if raised > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
                soft = raised
            except (ValueError, OSError):  # a system cap below the hard limit (macOS's OPEN_MAX)
                pass
        if soft < needed:
            raise ServeError(
                f"the open files limit is {soft} (ulimit -n, its hard limit {hard}): this server needs {needed} "
                f"({connections} connections, {MAX_UNPROVEN} not yet authorised, {_SPARE_FILES} files); "
                "raise the hard limit or lower --max-streams"
            )
    return soft

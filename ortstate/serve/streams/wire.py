"""A client WebSocket for asyncio with little work per message: websockets' Sans-I/O protocol
(``websockets.client.ClientProtocol``: the handshake, framing, masking, ping and close) driven by an
``asyncio.Protocol`` of its own.

``websockets``' asyncio client puts locks, an assembler and context managers around each message,
which cost a stream's step about as much as the rest of the client's work; a stream's socket here
has one message in flight at a time, so none of that is needed. Its errors are websockets' own
(``InvalidStatus`` for a refused handshake, ``ConnectionClosed`` with the close frames), as that
client raises them.

Two things per message are done here rather than by the protocol object, which would make a system
call for each: a message is framed here (RFC 6455 5.2, one final frame, masked) with a masking key
taken from random bytes drawn from ``os.urandom`` a few kilobytes at a time (a fresh, unpredictable
key per frame, as 5.3 asks); and a reply's timeout is one timer per connection, moved forward at
each message, not one timer per message.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections import deque
from collections.abc import Mapping
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode, apply_mask
from websockets.http11 import Response
from websockets.protocol import State
from websockets.uri import parse_uri

__all__ = ["WireConnection", "connect"]

_CLOSE_TIMEOUT = 10.0  # seconds to wait for the server to end TCP after the close handshake
_QUEUED = 16  # messages received and not yet taken before reading pauses
_KEYS = 4096  # random bytes drawn at a time for masking keys (1,024 frames)


async def connect(url: str, headers: Mapping[str, str], max_size: int, timeout: float) -> WireConnection:
    """A connection to the WebSocket at ``url`` (``ws://``; ``wss://`` with the default TLS context)
    whose upgrade request carries ``headers``; messages over ``max_size`` bytes close it (1009).

    Raises:
        websockets.exceptions.InvalidHandshake: the server refused the upgrade (``InvalidStatus``
            carries its response).
        OSError: the server cannot be reached.
        asyncio.TimeoutError: no answer within ``timeout`` seconds.
    """
    uri = parse_uri(url)
    protocol = ClientProtocol(uri, max_size=max_size)
    request = protocol.connect()
    for name, value in headers.items():
        request.headers[name] = value
    protocol.send_request(request)
    loop = asyncio.get_running_loop()
    connection = WireConnection(protocol)

    async def handshake() -> None:
        ssl = True if uri.secure else None
        await loop.create_connection(lambda: connection, uri.host, uri.port, ssl=ssl)
        await connection.opened

    try:
        await asyncio.wait_for(handshake(), timeout)  # one task per connection, not per message
    except BaseException:
        connection.abort()
        raise
    return connection


class WireConnection(asyncio.Protocol):
    """One client WebSocket: :meth:`send` a message, :meth:`recv` the next one, :meth:`close`."""

    def __init__(self, protocol: ClientProtocol) -> None:
        self.protocol = protocol
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()  # the handshake's outcome
        self._loop = loop
        self._transport: Any = None
        self._messages: deque[bytes | str] = deque()
        self._parts: list[bytes] = []  # a fragmented message's frames so far
        self._text = False
        self._waiter: asyncio.Future[None] | None = None  # recv waiting for a message or the end
        self._writable: asyncio.Future[None] | None = None  # send waiting for the buffer to drain
        self._lost: asyncio.Future[None] = loop.create_future()
        self._paused = False
        self._deadline: asyncio.TimerHandle | None = None  # the end of TCP after a close
        self._due = 0.0  # when the message recv waits for is late
        self._watch: asyncio.TimerHandle | None = None  # the timer that checks it
        self._keys = b""
        self._next_key = 0

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:  # uvloop's transports are no asyncio.Transport
        self._transport = transport
        self._flush()

    def data_received(self, data: bytes) -> None:
        self.protocol.receive_data(data)
        self._after_receive()

    def eof_received(self) -> None:
        self.protocol.receive_eof()
        self._after_receive()

    def connection_lost(self, exc: Exception | None) -> None:
        self.protocol.receive_eof()  # a no-op once closed
        self.protocol.state = State.CLOSED  # as websockets' own asyncio client does: TCP is gone
        for timer in (self._deadline, self._watch):
            if timer is not None:
                timer.cancel()
        if not self.opened.done():
            self.opened.set_exception(self.protocol.handshake_exc or ConnectionError("connection lost"))
        for future in (self._waiter, self._writable, self._lost):
            if future is not None and not future.done():
                future.set_result(None)

    def pause_writing(self) -> None:
        self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # -- messages ---------------------------------------------------------------------------------
    async def send(self, message: bytes | str) -> None:
        """Send one message (bytes: binary, str: text).

        Raises:
            ConnectionClosed: the connection is closing or closed.
        """
        if self.protocol.state is not State.OPEN:
            await self._closed()
        text = type(message) is str
        payload = message.encode() if text else message
        self._transport.write(_masked(Opcode.TEXT if text else Opcode.BINARY, payload, self._key()))
        if self._writable is not None:
            await self._writable

    async def recv(self, timeout: float) -> bytes | str:
        """The next message, within ``timeout`` seconds.

        Raises:
            ConnectionClosed: the connection closed (its close frames say how).
            asyncio.TimeoutError: none came in time (the connection stays as it is).
        """
        while not self._messages:
            if self.protocol.state is State.CLOSED:
                raise self.protocol.close_exc
            self._due = self._loop.time() + timeout
            if self._watch is None:
                self._watch = self._loop.call_at(self._due, self._expire)
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._paused and len(self._messages) <= _QUEUED // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return self._messages.popleft()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """The close handshake, then the end of TCP (at most ``_CLOSE_TIMEOUT`` seconds)."""
        if self.protocol.state is State.OPEN:
            self.protocol.send_close(code, reason)
            self._flush()
            self._arm_deadline()
        try:
            await asyncio.wait_for(asyncio.shield(self._lost), _CLOSE_TIMEOUT)
        except asyncio.TimeoutError:  # noqa: UP041 - not the builtin before Python 3.11
            self.abort()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _expire(self) -> None:
        """The timer of recv's wait: fail it if it is late, or look again when it will be."""
        self._watch = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._loop.time() >= self._due:
            waiter.set_exception(asyncio.TimeoutError())
        else:
            self._watch = self._loop.call_at(self._due, self._expire)

    def _key(self) -> bytes:
        """A fresh masking key."""
        at = self._next_key
        if at + 4 > len(self._keys):
            self._keys, at = os.urandom(_KEYS), 0
        self._next_key = at + 4
        return self._keys[at : at + 4]

    # -- the protocol's events --------------------------------------------------------------------
    def _after_receive(self) -> None:
        events = self.protocol.events_received()
        self._flush()  # pongs, the close frame's answer
        if self.protocol.close_expected():
            self._arm_deadline()
        for event in events:
            if isinstance(event, Frame):
                self._frame(event)
            elif isinstance(event, Response) and not self.opened.done():
                if self.protocol.handshake_exc is not None:
                    self.opened.set_exception(self.protocol.handshake_exc)
                else:
                    self.opened.set_result(None)
        if not self.opened.done() and self.protocol.handshake_exc is not None:
            self.opened.set_exception(self.protocol.handshake_exc)
        if self._waiter is not None and not self._waiter.done() and self._messages:
            self._waiter.set_result(None)

    def _frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        if opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            self._text = opcode is Opcode.TEXT
            self._parts = []
        elif opcode is not Opcode.CONT:
            return  # ping, pong and close: the protocol answered them
        self._parts.append(frame.data)
        if not frame.fin:
            return
        data = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        self._parts = []
        try:
            self._messages.append(data.decode() if self._text else bytes(data))
        except UnicodeDecodeError:
            self.protocol.fail(1007, "invalid UTF-8 in a text message")
            self._flush()
            self._arm_deadline()
            return
        if len(self._messages) >= _QUEUED and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def _flush(self) -> None:
        if self._transport is None:
            return
        for chunk in self.protocol.data_to_send():
            if chunk:
                self._transport.write(chunk)
            elif self._transport.can_write_eof():  # the protocol's signal to end TCP (after the close)
                self._transport.write_eof()

    def _arm_deadline(self) -> None:
        if self._deadline is None:
            self._deadline = self._loop.call_later(_CLOSE_TIMEOUT, self.abort)

    async def _closed(self) -> None:
        """Raise the close exception once the connection is closed."""
        if self.protocol.state is not State.CLOSED:
            self._arm_deadline()
            await asyncio.shield(self._lost)
        raise self.protocol.close_exc


def _masked(opcode: Opcode, payload: bytes, key: bytes) -> bytes:
    """One final client frame (RFC 6455 5.2): ``payload``, masked with ``key``."""
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    return header + key + apply_mask(payload, key)

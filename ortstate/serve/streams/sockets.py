"""A stream's WebSocket ``/v1/streams/{id}``, on the bare ASGI interface: its messages answered one at
a time, in order, until it closes, the stream ends, the server shuts down or the socket's time is
up (``handoff``).

Each message of each stream passes here, so this talks ASGI itself instead of through Starlette's
router, middleware and ``WebSocket`` (a dozen coroutines deep, each resumed at every ``await``: a
fifth of a step's server time at 256 streams).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.websockets import WebSocketDisconnect

from ...errors import OrtStateError, ServeError
from ..compat import within
from .codec import OK, decode_npz, encode_npz, error_text, parse_op
from .ids import ID_PATTERN
from .service import CLOSE_UNKNOWN, StreamService

__all__ = ["CLOSE_REPLACED", "CLOSE_RESTART", "INTERNAL_ERROR", "PREFIX", "Socket", "serve_socket"]

PREFIX = "/v1/streams/"
INTERNAL_ERROR = "internal error (logged on the server)"
CLOSE_REPLACED = 4409  # another connection to the same stream took it over
CLOSE_RESTART = 1012  # "service restart": the message was not acted on; reconnect and send it again

Message = MutableMapping[str, Any]
logger = logging.getLogger("ortstate.serve")
_GONE = (WebSocketDisconnect, RuntimeError, OSError)  # closed, or taken over meanwhile


class Socket:
    """One WebSocket's ASGI channel: what a stream's messages are read from and answered on, and
    what the service closes when another connection takes the stream over."""

    __slots__ = ("_send", "receive")

    def __init__(self, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]) -> None:
        self.receive = receive  # the server's own: no coroutine of ours around each message
        self._send = send

    async def reply(self, reply: bytes | str) -> bool:
        """Send ``reply``; False once the socket is gone."""
        try:
            if type(reply) is bytes:
                await self._send({"type": "websocket.send", "bytes": reply})
            else:
                await self._send({"type": "websocket.send", "text": reply})
        except _GONE:
            return False
        return True

    async def close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):  # it may be gone already
            await self._send({"type": "websocket.close", "code": code, "reason": reason[:120]})  # ≤ 123 bytes


async def serve_socket(
    service: StreamService,
    path: str,
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
    limit: int,
    handoff: float | None,
) -> None:
    """The WebSocket of the stream ``path`` names (``/v1/streams/ID``), from its connect message to
    its end. An unknown id is closed with 4404; a second connection to a stream takes it over (the
    first is closed with 4409)."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    socket = Socket(receive, send)
    name = path.removeprefix(PREFIX)
    if not ID_PATTERN.fullmatch(name) or not service.knows(name):
        await socket.close(CLOSE_UNKNOWN, "no such stream: open one with POST /v1/streams")
        return
    previous = service.attach(name, socket)
    if previous is not None:
        await previous.close(CLOSE_REPLACED, "another connection took over this stream")
    try:
        await _messages(service, name, socket, limit, handoff)
    finally:
        if service.detach(name, socket) and handoff is not None:
            with contextlib.suppress(OrtStateError):  # then it stays here, parked at shutdown
                await service.park(name)  # its next socket may reach another server


async def _messages(service: StreamService, name: str, socket: Socket, limit: int, handoff: float | None) -> None:
    until = None if handoff is None else time.monotonic() + handoff
    while True:
        try:
            if until is None:
                message = await socket.receive()
            else:
                message = await within(socket.receive(), max(until - time.monotonic(), 0.0))
        except asyncio.TimeoutError:  # noqa: UP041 - not the builtin before 3.11, where it is an OSError
            message = None
        except _GONE:
            return
        if message is not None and message["type"] != "websocket.receive":
            return  # websocket.disconnect
        if message is None or service.draining:  # not acted on: sent again after reconnecting
            if message is None:
                await service.park(name)
            reason = "handing the stream over" if message is None else "server shutting down"
            await socket.close(CLOSE_RESTART, f"{reason}; reconnect to continue")
            return
        service.in_flight += 1
        try:
            if not await _answer(service, name, socket, message, limit):
                return
        finally:
            service.in_flight -= 1
        if until is not None and time.monotonic() >= until:
            until = time.monotonic()  # the next wait times out at once: parked and closed


async def _answer(service: StreamService, name: str, socket: Socket, message: Message, limit: int) -> bool:
    """Act on one message and reply; False once the socket is closed."""
    data, text = message.get("bytes"), message.get("text")
    try:
        if data is not None:
            reply: bytes | str = encode_npz(await service.step(name, decode_npz(data, limit)))
        elif text is not None:
            op = parse_op(text, limit)
            if op == "last":  # the reply of the stream's last step again (--durable)
                reply = encode_npz(await service.last(name))
            else:
                await (service.reset(name) if op == "reset" else service.close(name))
                reply = OK
        else:
            return True
    except ServeError as exc:
        if exc.code:  # the stream is gone or cannot come back
            await socket.close(exc.code, str(exc))
            return False
        reply = error_text(exc)
    except Exception:  # noqa: BLE001 - a bug: the client is told, the server logs it and goes on
        logger.exception("ortstate serve: a stream's message raised")  # Python's words stay here
        reply = error_text(INTERNAL_ERROR)
    if not await socket.reply(reply):
        return False
    if text is not None and reply == OK and not service.knows(name):
        await socket.close(1000, "stream closed")
        return False
    return True

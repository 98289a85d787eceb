"""The ASGI app of ``ortstate serve``: HTTP for health, the model, stats and opening streams; one
WebSocket per stream for its steps.

Protocol (docs/serve.md): ``POST /v1/streams`` answers ``{"id": ...}``; ``/v1/streams/{id}`` takes
binary messages (one step's feeds as ``.npz``, answered by its outputs as ``.npz``) and text ones
(``{"op": "reset"}``, ``{"op": "close"}``, answered ``{"ok": true}``). A bad message is answered
``{"error": ...}`` and changes nothing; the socket stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import OrtStateError, ServeError
from .auth import BearerAuth
from .codec import OK, decode_npz, encode_npz, error_text, parse_op
from .service import CLOSE_UNKNOWN, ID_PATTERN, StreamService

__all__ = ["CLOSE_REPLACED", "CLOSE_RESTART", "DEFAULT_MAX_MESSAGE_BYTES", "create_app"]

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
CLOSE_REPLACED = 4409  # another connection to the same stream took it over
CLOSE_RESTART = 1012  # "service restart": the message was not acted on; reconnect and send it again
logger = logging.getLogger("ortstate.serve")


def create_app(
    service: StreamService,
    *,
    token: str | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    idle_park: float | None = None,
    handoff: float | None = None,
) -> Any:
    """The ASGI app serving ``service``'s streams.

    Args:
        token: if given, every request must carry ``Authorization: Bearer TOKEN``.
        max_message_bytes: the largest step message (and its arrays, uncompressed) a stream takes.
        idle_park: park streams idle that long (seconds; needs the service's state directory).
        handoff: park a stream and close its socket (1012: reconnect) once the socket has been
            open that long, between two messages: its next connection may reach another server
            (servers behind a router that moves streams when servers come and go).
    """

    async def stream(websocket: WebSocket) -> None:
        await websocket.accept()
        name = websocket.path_params["id"]
        if not ID_PATTERN.fullmatch(name) or not service.knows(name):
            await websocket.close(CLOSE_UNKNOWN, "no such stream: open one with POST /v1/streams")
            return
        previous = service.attach(name, websocket)
        if previous is not None:
            with contextlib.suppress(Exception):  # it may be gone already
                await previous.close(CLOSE_REPLACED, "another connection took over this stream")
        try:
            await _serve_stream(service, name, websocket, max_message_bytes, handoff)
        finally:
            if service.detach(name, websocket) and handoff is not None:
                with contextlib.suppress(OrtStateError):  # then it stays here, parked at shutdown
                    await service.park(name)  # its next socket may reach another server

    routes = [
        *_http_routes(service),
        WebSocketRoute("/v1/streams/{id:path}", stream),  # any id: unknown ones get 4404
    ]
    app: Any = Starlette(routes=routes, lifespan=_lifespan(service, idle_park))
    app.state.service = service
    return app if token is None else BearerAuth(app, token)


def _http_routes(service: StreamService) -> list[Route]:
    """The HTTP endpoints: health, model, stats, a stream's whereabouts, opening a stream."""

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def model(request: Request) -> JSONResponse:
        return JSONResponse(service.model())

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(service.stats())

    async def describe(request: Request) -> JSONResponse:
        name = request.path_params["id"]
        where = service.where(name) if ID_PATTERN.fullmatch(name) else None
        if where is None:
            return JSONResponse({"error": "no such stream"}, status_code=404)
        return JSONResponse({"id": name, "state": where, "server": service.name})

    async def open_stream(request: Request) -> JSONResponse:
        try:
            return JSONResponse({"id": service.open()}, status_code=201)
        except ServeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.code or 500)

    return [
        Route("/v1/health", health),
        Route("/v1/model", model),
        Route("/v1/stats", stats),
        Route("/v1/streams", open_stream, methods=["POST"]),
        Route("/v1/streams/{id}", describe),
    ]


def _lifespan(service: StreamService, idle_park: float | None) -> Any:
    """The app's lifespan: idle streams parked every so often while it serves, every stream parked
    when it stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        parker = asyncio.create_task(_park_idle(service, idle_park)) if idle_park is not None else None
        try:
            yield
        finally:
            if parker is not None:
                parker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await parker
            await service.park_all()

    return lifespan


async def _serve_stream(
    service: StreamService, name: str, websocket: WebSocket, limit: int, handoff: float | None
) -> None:
    """Answer ``websocket``'s messages, one at a time, until it closes, the stream ends, the server
    shuts down or the socket's time is up (``handoff``)."""
    until = None if handoff is None else time.monotonic() + handoff
    while True:
        try:
            wait = None if until is None else max(until - time.monotonic(), 0.0)
            message = await asyncio.wait_for(websocket.receive(), wait)
        except (WebSocketDisconnect, RuntimeError):
            return
        except asyncio.TimeoutError:  # noqa: UP041 - not the builtin before Python 3.11
            message = None
        if message is not None and message["type"] == "websocket.disconnect":
            return
        if message is None or service.draining:  # not acted on: sent again after reconnecting
            if message is None:
                await service.park(name)
            reason = "handing the stream over" if message is None else "server shutting down"
            await _close(websocket, CLOSE_RESTART, f"{reason}; reconnect to continue")
            return
        service.in_flight += 1
        try:
            if not await _answer(service, name, websocket, message, limit):
                return
        finally:
            service.in_flight -= 1
        if until is not None and time.monotonic() >= until:
            until = time.monotonic()  # the next wait times out at once: parked and closed


async def _answer(service: StreamService, name: str, websocket: WebSocket, message: Any, limit: int) -> bool:
    """Act on one message and reply; False once the socket is closed."""
    data, text = message.get("bytes"), message.get("text")
    try:
        if data is not None:
            outputs = await service.step(name, decode_npz(data, limit))
            reply: bytes | str = encode_npz(outputs)
        elif text is not None:
            op = parse_op(text, limit)
            await (service.reset(name) if op == "reset" else service.close(name))
            reply = OK
        else:
            return True
    except ServeError as exc:
        if exc.code:  # the stream is gone or cannot come back
            await _close(websocket, exc.code, str(exc))
            return False
        reply = error_text(exc)
    except Exception as exc:  # noqa: BLE001 - a bug: said to the client, the server goes on
        reply = error_text(f"internal error: {type(exc).__name__}: {exc}")
    if not await _send(websocket, reply):
        return False
    if text is not None and reply == OK and not service.knows(name):
        await _close(websocket, 1000, "stream closed")
        return False
    return True


async def _send(websocket: WebSocket, reply: bytes | str) -> bool:
    try:
        if isinstance(reply, bytes):
            await websocket.send_bytes(reply)
        else:
            await websocket.send_text(reply)
    except (WebSocketDisconnect, RuntimeError, OSError):  # closed or taken over meanwhile
        return False
    return True


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    with contextlib.suppress(Exception):
        await websocket.close(code, reason[:120])  # a close reason has at most 123 bytes


async def _park_idle(service: StreamService, seconds: float) -> None:
    while True:
        await asyncio.sleep(min(max(seconds / 2, 0.05), 1.0))
        try:
            await service.park_idle(seconds)
        except OrtStateError as exc:  # a full disk: the streams stay in memory; try again later
            logger.warning("ortstate serve: cannot park idle streams: %s", exc)

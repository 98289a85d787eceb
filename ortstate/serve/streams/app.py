"""The ASGI app of ``ortstate serve``: HTTP for health, the model, stats and opening streams; one
WebSocket per stream for its steps.

Protocol (docs/serve.md): ``POST /v1/streams`` answers ``{"id": ...}``; ``/v1/streams/{id}`` takes
binary messages (one step's feeds as ``.npz``, answered by its outputs as ``.npz``) and text ones
(``{"op": "reset"}``, ``{"op": "close"}``, answered ``{"ok": true}``). A bad message is answered
``{"error": ...}`` and changes nothing; the socket stays open. The HTTP endpoints are Starlette's,
every error of theirs JSON (``{"error": ...}``; an unexpected one a 500 naming a log id:
:mod:`ortstate.serve.internal_errors`); the stream sockets go straight to :mod:`.sockets`.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ...errors import ServeError
from ..auth import BearerAuth, Receive, Scope, Send
from ..guard import stream_error_body
from ..internal_errors import internal_handler, logged_app
from ..lifespan import parking_lifespan
from ..origin import OriginCheck
from .ids import ID_PATTERN
from .service import StreamService
from .sockets import PREFIX, serve_socket

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "create_app"]

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20


def create_app(
    service: StreamService,
    *,
    token: str | None = None,
    allow_origins: tuple[str, ...] = (),
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    idle_park: float | None = None,
    handoff: float | None = None,
) -> Any:
    """The ASGI app serving ``service``'s streams.

    Args:
        token: if given, every request must carry ``Authorization: Bearer TOKEN``.
        allow_origins: web pages' origins let in besides the server's own (:mod:`ortstate.serve.origin`).
        max_message_bytes: the largest step message (and its arrays, uncompressed) a stream takes.
        idle_park: park streams idle that long (seconds; needs the service's state directory).
        handoff: park a stream and close its socket (1012: reconnect) once the socket has been
            open that long, between two messages: its next connection may reach another server
            (servers behind a router that moves streams when servers come and go).
    """

    handlers: dict[Any, Any] = {HTTPException: _http_error, Exception: internal_handler(_internal_body)}
    http = logged_app(
        Starlette(
            routes=_http_routes(service),
            exception_handlers=handlers,
            lifespan=parking_lifespan(service.park_idle, service.park_all, idle_park, "streams"),
        ),
        _internal_body,
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if path.startswith(PREFIX):  # any id: unknown ones get 4404
                await serve_socket(service, path, receive, send, max_message_bytes, handoff)
                return
        await http(scope, receive, send)

    authorised = app if token is None else BearerAuth(app, token)
    return OriginCheck(authorised, token=token is not None, allow_origins=allow_origins, error_body=stream_error_body)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (no such route, a method not allowed) in the server's JSON shape."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": f"{request.method} {request.url.path}: {exc.detail}"}, status_code=exc.status_code)


def _internal_body(log_id: str) -> dict[str, str]:
    return {"error": f"internal error (log id {log_id}): the server's log has the details"}


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
        return JSONResponse(
            {
                "id": name,
                "state": where,
                "server": service.name,
                "steps": service.steps_of(name),
                "durable": service.journal is not None,
            }
        )

    async def open_stream(request: Request) -> JSONResponse:
        try:
            stream = await service.open()
            return JSONResponse({"id": stream, "durable": service.journal is not None}, status_code=201)
        except ServeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.code or 500)

    return [
        Route("/v1/health", health),
        Route("/v1/model", model),
        Route("/v1/stats", stats),
        Route("/v1/streams", open_stream, methods=["POST"]),
        Route("/v1/streams/{id}", describe),
    ]

"""How the OpenAI server answers what goes wrong: every error in OpenAI's body
``{"error": {"message", "type", "param", "code"}}`` as ``application/json``, routing errors
included; a 503 with ``Retry-After``; anything unexpected a 500 whose message names a log id, the
server's log line with that id holding the traceback, and no text of the exception's (uvicorn's
own answer would be plain text, Starlette's too)."""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import OrtStateError
from .auth import Receive, Scope, Send
from .guard import RETRY_AFTER
from .openai_api import ApiError

__all__ = ["api_error", "failed", "full_body", "http_error", "internal", "internal_error", "logged_app"]

_LOG_ID = "ortstate.log_id"  # the scope's key for an internal error's log id
logger = logging.getLogger("ortstate.serve")


def full_body() -> bytes:
    """The body of the 503 a server whose every connection is being answered gives a new one."""
    error = ApiError("server full: try again later", 503, kind="server_error", error_code="server_full")
    return json.dumps(error.body()).encode()


async def api_error(request: Request, exc: Exception) -> JSONResponse:
    """An :class:`ApiError` as OpenAI's error body."""
    assert isinstance(exc, ApiError)
    headers = {"retry-after": RETRY_AFTER.decode()} if exc.code == 503 else None
    return JSONResponse(exc.body(), status_code=exc.code, headers=headers)


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's answer to an exception nothing else handled: logged with a log id and its
    traceback, then a 500 naming the id, no text of the exception's."""
    return JSONResponse(internal(_log(request.scope, exc)).body(), status_code=500)


def _log(scope: Scope, exc: BaseException) -> str:
    """Log ``exc`` with its traceback under a new log id, kept in the request's scope; the id."""
    log_id = scope[_LOG_ID] = secrets.token_hex(6)
    logger.error(
        "ortstate serve: internal error, log id %s (%s %s)",
        log_id,
        scope.get("method"),
        scope.get("path"),
        exc_info=exc,
    )
    return log_id


def internal(log_id: str) -> ApiError:
    return ApiError(
        f"internal error (log id {log_id}): the server's log has the details",
        500,
        kind="server_error",
        error_code="internal_error",
    )


def logged_app(app: Any) -> Any:
    """``app``, an exception out of which is not raised on to uvicorn (whose answer is plain text,
    and whose log line has no id): Starlette raises again what :func:`internal_error` logged and
    answered; anything else (an answer that had begun) is logged here, and answered if it had not."""

    async def logged(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan's failures are uvicorn's to report
            await app(scope, receive, send)
            return
        started = False

        async def sending(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await app(scope, receive, sending)
        except Exception as exc:  # noqa: BLE001 - the last resort: nothing of it reaches the client
            if _LOG_ID in scope:
                return
            log_id = _log(scope, exc)
            if not started:
                await JSONResponse(internal(log_id).body(), status_code=500)(scope, receive, send)

    return logged


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (no such route, a method not allowed) as OpenAI's error body."""
    assert isinstance(exc, HTTPException)
    error = ApiError(f"{request.method} {request.url.path}: {exc.detail}", exc.status_code)
    return JSONResponse(error.body(), status_code=exc.status_code)


def failed(exc: OrtStateError) -> ApiError:
    """A generation the engine could not run: the log has why, the client a log id."""
    log_id = secrets.token_hex(6)
    logger.error("ortstate serve: a generation failed, log id %s: %s", log_id, exc, exc_info=exc)
    return internal(log_id)

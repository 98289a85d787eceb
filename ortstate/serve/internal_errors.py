"""The last resort of both servers' HTTP apps: an exception nothing handled is logged with a new log
id and its traceback, and answered 500 with a JSON body that names the id and holds no text of the
exception's (uvicorn's and Starlette's own answers would be plain text, the exception's text a leak).
Each server gives the body its own shape (OpenAI's for the LLM server)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from .auth import Receive, Scope, Send

__all__ = ["internal_handler", "log_internal", "logged_app"]

_LOG_ID = "ortstate.log_id"  # the scope's key for an internal error's log id
logger = logging.getLogger("ortstate.serve")

Body = Callable[[str], Any]  # a log id -> the 500's JSON body


def log_internal(scope: Scope, exc: BaseException) -> str:
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


def internal_handler(body: Body) -> Callable[[Request, Exception], Any]:
    """Starlette's handler for ``Exception``: logged (:func:`log_internal`), answered 500 ``body(id)``."""

    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(body(log_internal(request.scope, exc)), status_code=500)

    return handler


def logged_app(app: Any, body: Body) -> Any:
    """``app``, an exception out of which is not raised on to uvicorn: Starlette raises again what
    :func:`internal_handler` logged and answered; anything else (an answer that had begun) is
    logged here, and answered 500 ``body(id)`` if it had not."""

    async def logged(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan's failures are uvicorn's to report; sockets answer their own
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
            log_id = log_internal(scope, exc)
            if not started:
                await JSONResponse(body(log_id), status_code=500)(scope, receive, send)

    return logged

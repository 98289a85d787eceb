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

from ...errors import OrtStateError
from ..guard import RETRY_AFTER
from ..internal_errors import internal_handler
from ..internal_errors import logged_app as _logged_app
from .api import ApiError

__all__ = ["api_error", "error_body", "failed", "http_error", "internal", "internal_error", "logged_app"]

logger = logging.getLogger("ortstate.serve")


_CODES = {400: "invalid_http", 403: "forbidden", 408: "request_timeout", 431: "headers_too_large"}


def error_body(status: int, message: str) -> bytes:
    """OpenAI's error body of what the connection guard answers itself (:mod:`ortstate.serve.guard`):
    a request that is not HTTP (400), late (408), with headers too large (431), or a server whose
    every connection is being answered (503); and of a web page refused (403, :mod:`ortstate.serve.origin`)."""
    if status == 503:
        error = ApiError(message, 503, kind="server_error", error_code="server_full")
    else:
        error = ApiError(message, status, error_code=_CODES.get(status))
    return json.dumps(error.body()).encode()


async def api_error(request: Request, exc: Exception) -> JSONResponse:
    """An :class:`ApiError` as OpenAI's error body."""
    assert isinstance(exc, ApiError)
    headers = {"retry-after": RETRY_AFTER.decode()} if exc.code == 503 else None
    return JSONResponse(exc.body(), status_code=exc.code, headers=headers)


def internal(log_id: str) -> ApiError:
    return ApiError(
        f"internal error (log id {log_id}): the server's log has the details",
        500,
        kind="server_error",
        error_code="internal_error",
    )


def _internal_body(log_id: str) -> dict[str, Any]:
    return internal(log_id).body()


internal_error = internal_handler(_internal_body)  # Starlette's handler for any other exception


def logged_app(app: Any) -> Any:
    """``app`` whose unhandled exceptions are logged and answered in OpenAI's shape (see
    :func:`~ortstate.serve.internal_errors.logged_app`)."""
    return _logged_app(app, _internal_body)


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

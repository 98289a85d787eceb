"""Who may talk to a server: a bearer token on every HTTP request and WebSocket, and the rule that a
server without a token listens on loopback only."""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..errors import ServeError

__all__ = ["CLOSE_UNAUTHORIZED", "BearerAuth", "check_exposure", "is_loopback"]

CLOSE_UNAUTHORIZED = 4401

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to listen on anything but loopback without a token.

    Raises:
        ServeError: naming the address and what to do.
    """
    if token == "":
        raise ServeError("the token is empty: give a secret of your own with --token or ORTSTATE_SERVE_TOKEN")
    if token is None and not is_loopback(host):
        raise ServeError(
            f"refusing to listen on {host} without a token: anyone who reaches it could use the model; "
            "give --token (or ORTSTATE_SERVE_TOKEN), or listen on 127.0.0.1"
        )


class BearerAuth:
    """ASGI middleware: every HTTP request and WebSocket carries ``Authorization: Bearer TOKEN``;
    others get 401 (HTTP, with ``error_body`` if given) or are closed with code 4401 (WebSocket) before
    reaching ``app``."""

    def __init__(self, app: ASGIApp, token: str, *, error_body: bytes | None = None) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._body = error_body  # the 401's JSON body (default: {"error": reason})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        reason = "missing or wrong token (send Authorization: Bearer TOKEN)"
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": CLOSE_UNAUTHORIZED, "reason": reason})
            return
        body = self._body if self._body is not None else json.dumps({"error": reason}).encode()
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _allowed(self, scope: Scope) -> bool:
        given = [v for k, v in scope.get("headers", ()) if k.lower() == b"authorization"]
        return len(given) == 1 and hmac.compare_digest(given[0], self._expected)

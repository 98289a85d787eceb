"""Which web pages may drive a server. A page a user visits can send requests to a server on
loopback: by DNS rebinding (its site's name resolves to 127.0.0.1 once the page has loaded, so the
page is same-origin with the server and reads its replies), by a cross-site request (a POST without
a body, or with a simple content type, needs no preflight) and by a WebSocket (no CORS at all). So,
before the app sees a request or a WebSocket handshake:

- a server without a token answers only requests whose ``Host`` header names a loopback host
  (``localhost``, 127.0.0.0/8, ``[::1]``, with or without a port): a rebinding page's requests name
  its own site. With a token, the token is the defence (a page cannot add it to a cross-site
  request), and the server may be reached by any name;
- a request carrying an ``Origin`` header (browsers send one on every cross-site request, on POSTs
  and on every WebSocket) is served only if that origin is the request's own (its host and port
  are ``Host``'s) or one of ``allow_origins`` (exactly ``scheme://host[:port]``). Those get CORS
  answers too (Starlette's ``CORSMiddleware``, before the token is checked: a preflight carries
  none), so that a web UI there can send JSON and read the replies.

Anything else is answered 403 in the server's JSON error shape; a WebSocket is refused at its
handshake (403, with that body, where the server can send one: uvicorn can). Programs (curl,
OpenAI's client, Python's websockets, Ray's proxy) send no ``Origin`` and are not affected.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from starlette.middleware.cors import CORSMiddleware

from .auth import ASGIApp, Receive, Scope, Send, is_loopback
from .config import SettingError, shown

__all__ = ["OriginCheck", "check_origins"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_ORIGIN = re.compile(r"(https?)://([a-z0-9._-]+|\[[0-9a-f:.]+\])(?::([0-9]{1,5}))?")
_SHOWN = 80  # characters of a refused header a refusal repeats
# What a page let in may read of a reply besides the simple headers: a conversation's server, when to retry.
_EXPOSED = ("x-ortstate-server", "retry-after")


def _authority(text: str) -> tuple[str, int | None] | None:
    """``host[:port]`` (a host in brackets for IPv6) as (the host, lower-cased, no brackets; the port
    or None); None if it is not one."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not host:
            return None
    else:
        host, _, port = text.partition(":")
        rest = text[len(host) :]
        if not host or ":" in port:
            return None
    if not rest:
        return host.lower(), None
    port = rest.removeprefix(":")
    if rest[:1] != ":" or not (port.isascii() and port.isdigit()) or len(port) > 5 or int(port) > 65535:
        return None
    return host.lower(), int(port)


def _origin(text: str) -> tuple[str, str, int] | None:
    """An ``Origin`` (``scheme://host[:port]``, http or https, an ASCII host name or an address) as
    (scheme, host, port: the scheme's default if none); None if it is not one (``null`` included)."""
    match = _ORIGIN.fullmatch(text.lower())
    if match is None or (match.group(3) is not None and int(match.group(3)) > 65535):
        return None
    scheme, host, port = match.groups()
    return scheme, host.strip("[]"), _DEFAULT_PORTS[scheme] if port is None else int(port)


def _serialised(origin: tuple[str, str, int]) -> str:
    """An origin as a browser sends it: lower-case, the default port left out."""
    scheme, host, port = origin
    shown_host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown_host}" + ("" if port == _DEFAULT_PORTS[scheme] else f":{port}")


def check_origins(values: Any) -> tuple[str, ...]:
    """The ``allow_origins`` setting: each ``scheme://host[:port]`` (http or https, no path, no
    ``*``), as a browser sends it (lower-case, the default port left out).

    Raises:
        SettingError: naming ``allow_origins`` and the value that is not one.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise SettingError(f"{{allow_origins}} must be a list of origins, got {shown(values)}")
    origins = []
    for value in values:
        origin = _origin(value) if isinstance(value, str) else None
        if origin is None:
            raise SettingError(
                f"{{allow_origins}} takes origins as browsers send them, scheme://host[:port] (http or https, "
                f"no path, no '*'), got {shown(value)}"
            )
        origins.append(_serialised(origin))
    return tuple(origins)


def _cut(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")


class OriginCheck:
    """ASGI middleware: the module's rules before ``app``.

    Args:
        token: the server has a token (then any ``Host`` is served).
        allow_origins: origins let in besides the request's own (:func:`check_origins`' form), with
            CORS answers.
        error_body: the server's JSON error body for a status and a message.
    """

    def __init__(
        self, app: ASGIApp, *, token: bool, allow_origins: Iterable[str], error_body: Callable[[int, str], bytes]
    ) -> None:
        self.allowed = frozenset(allow_origins)
        self.app = (
            app
            if not self.allowed
            else CORSMiddleware(
                app,
                allow_origins=sorted(self.allowed),
                allow_methods=["*"],
                allow_headers=["*"],
                expose_headers=_EXPOSED,
            )
        )
        self.token = token
        self.error_body = error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reason = self.refusal(scope) if scope["type"] in ("http", "websocket") else None
        if reason is None:
            await self.app(scope, receive, send)
            return
        body = self.error_body(403, reason)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 403, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await receive()  # websocket.connect
        if "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": 403, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:  # closed before it is accepted: the server answers the handshake 403, without a body
            await send({"type": "websocket.close", "code": 1008, "reason": reason})

    def refusal(self, scope: Scope) -> str | None:
        """Why a request with ``scope`` is refused (one line), or None."""
        hosts = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"host"]
        origins = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"origin"]
        if len(hosts) > 1 or len(origins) > 1:
            return "the request has more than one Host or Origin header: send one of each at most"
        host = _authority(hosts[0]) if hosts else None
        if not self.token and (host is None or not is_loopback(host[0])):
            shown_host = _cut(hosts[0]) if hosts else "missing"
            return (
                f"the Host header ({shown_host}) names no loopback host: a server without a token answers "
                "requests to localhost, 127.0.0.1 or [::1] only (against DNS rebinding); give it a --token "
                "to serve other names"
            )
        if not origins:
            return None
        origin = _origin(origins[0])
        if origin is not None and (_serialised(origin) in self.allowed or _same(origin, host)):
            return None
        let_in = f"--allow-origin {_serialised(origin)}" if origin is not None else "--allow-origin ORIGIN"
        return (
            f"the Origin header ({_cut(origins[0])}) is another site's: a web page may use this server only "
            f"from the server's own origin; start the server with {let_in} to let that page in"
        )


def _same(origin: tuple[str, str, int], host: tuple[str, int | None] | None) -> bool:
    """``origin`` is the request's own: its host and port are the ``Host`` header's (a ``Host``
    without a port: the origin's scheme's default; a TLS proxy in front serves https on 443)."""
    scheme, name, port = origin
    return host is not None and host[0] == name and (host[1] or _DEFAULT_PORTS[scheme]) == port

"""What both clients of ``ortstate serve`` share: the server's address, token and JSON endpoints
(:class:`ServerHttp`), what a closed or lost connection means (:func:`closed_error`), the one retry
policy (:class:`Retry`), and how a step's reply reads.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidStatus

from ...errors import ServeError
from .codec import decode_npz

__all__ = [
    "LOST",
    "REPLY_LIMIT",
    "SESSION_HEADER",
    "TIMEOUT",
    "Retry",
    "ServerHttp",
    "after_loss",
    "check_ok",
    "closed_error",
    "reply_outputs",
    "was_lost",
    "worth_again",
]

SESSION_HEADER = "X-Session-Id"
REPLY_LIMIT = 1 << 30  # outputs the client takes from its server: large, but bounded
TIMEOUT = 60.0
RESTART = 1012
LOST = 1006  # ServeError.code of a connection that broke with no word from the server (WebSocket's own)
FIRST_DELAY, LAST_DELAY = 0.05, 1.0  # seconds between connecting again


class ServerHttp:
    """The server's address and token, and its JSON endpoints."""

    def __init__(self, url: str, token: str | None, timeout: float) -> None:
        self.url = url.rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise ServeError(f"{url}: a server URL starts with http:// or https://")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout

    def call(self, method: str, path: str, headers: Mapping[str, str] | None = None) -> Any:
        request = urllib.request.Request(self.url + path, method=method, headers=dict(headers or self.headers))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                why = json.loads(exc.read()).get("error", exc.reason)
            except (ValueError, AttributeError):
                why = exc.reason
            raise ServeError(f"{self.url}{path}: {exc.code} {why}", exc.code) from None
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            # HTTPException: the server went away mid-reply (IncompleteRead, RemoteDisconnected)
            reason = getattr(exc, "reason", exc)
            raise ServeError(f"{self.url}{path}: cannot reach the server ({reason})", LOST) from None

    def stream_headers(self, stream: str) -> dict[str, str]:
        """The headers of a request about ``stream``: the token, and the stream's id as the session
        id a router keeps a session on (Ray Serve's consistent-hash router reads X-Session-Id)."""
        return {**self.headers, SESSION_HEADER: stream}

    def socket_url(self, stream: str) -> str:
        return "ws" + self.url.removeprefix("http") + f"/v1/streams/{stream}"


def closed_error(exc: Exception, stream: str) -> ServeError:
    if isinstance(exc, ConnectionClosed) and exc.rcvd is not None:
        code, reason = exc.rcvd.code, exc.rcvd.reason
        return ServeError(f"stream {stream}: closed by the server ({code}: {reason or 'no reason given'})", code)
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        return ServeError(f"stream {stream}: the server refused the connection (HTTP {status})", status)
    return ServeError(f"stream {stream}: connection lost ({exc or type(exc).__name__})", LOST)


def worth_again(error: ServeError) -> bool:
    """The server did not act on the message (it is shutting down, or hands the stream over, 1012),
    or refused a connection for now (503 while a server behind a router starts or stops): connect
    again and send it again."""
    return error.code in (RESTART, 502, 503)


def was_lost(error: ServeError) -> bool:
    """The connection broke without a word from the server (it was killed, the network failed):
    whether the last message was acted on is not known."""
    return error.code == LOST


def after_loss(info: dict[str, Any], steps: int | None, error: ServeError) -> str:
    """What a stream whose step's connection was lost does, from its server's ``GET
    /v1/streams/ID`` (``info``) and the steps it has had replies to (``steps``): ``again`` (the
    step was not made: send it again) or ``last`` (it was made, its reply lost: ask for it)."""
    made = info.get("steps")
    if not info.get("durable"):
        raise error  # a plain server: whether the step was made is not known
    if made is None or steps is None:
        raise ServeError(f"{error}; the step count to resume from is not known (server: {made}, client: {steps})")
    if made == steps:
        return "again"
    if made == steps + 1:
        return "last"
    raise ServeError(f"stream {info.get('id')}: the server has it at step {made}, this client at {steps}")


class Retry:
    """Both clients' one retry policy: try again after a retriable error, waiting 0.05 s at first and
    twice as long each time (1 s at most), until ``timeout`` seconds have passed."""

    def __init__(self, timeout: float) -> None:
        self._deadline = time.monotonic() + timeout
        self._delay = FIRST_DELAY

    def delay(self, error: ServeError, retriable: Callable[[ServeError], bool]) -> float:
        """Seconds to wait before trying again after ``error``; raises it if it is not
        ``retriable`` or the time is up."""
        if not retriable(error) or time.monotonic() + self._delay > self._deadline:
            raise error
        delay, self._delay = self._delay, min(2 * self._delay, LAST_DELAY)
        return delay


def reply_outputs(message: str | bytes) -> dict[str, np.ndarray]:
    if isinstance(message, bytes):
        return decode_npz(message, REPLY_LIMIT)
    raise ServeError(json.loads(message).get("error", message))


def check_ok(message: str | bytes) -> None:
    reply = json.loads(message) if isinstance(message, str) else {}
    if reply.get("ok") is not True:
        raise ServeError(reply.get("error", "unexpected reply"))

"""Talking to ``ortstate serve`` from Python: :class:`Client` (blocking) and :class:`AsyncClient`
(asyncio), each handing out streams whose ``step(feeds)`` returns the step's outputs.

```python
with Client("http://127.0.0.1:8000") as client:
    stream = client.open()                   # a new stream; stream.id is its capability
    outputs = stream.step({"x": x})          # {output name: array}
    stream.disconnect()                      # the stream lives on in the server ...
    stream = client.stream(stream.id)        # ... and continues where it was
    stream.close()                           # ends it
```
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as connect_async
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection as SyncConnection
from websockets.sync.client import connect as connect_sync

from ..errors import ServeError
from .codec import decode_npz, encode_npz

__all__ = ["AsyncClient", "AsyncStream", "Client", "Stream"]

_REPLY_LIMIT = 1 << 30  # outputs the client takes from its server: large, but bounded
_TIMEOUT = 60.0


class _Http:
    """The server's address and token, and its JSON endpoints."""

    def __init__(self, url: str, token: str | None, timeout: float) -> None:
        self.url = url.rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise ServeError(f"{url}: a server URL starts with http:// or https://")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout

    def call(self, method: str, path: str) -> Any:
        request = urllib.request.Request(self.url + path, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                why = json.loads(exc.read()).get("error", exc.reason)
            except (ValueError, AttributeError):
                why = exc.reason
            raise ServeError(f"{self.url}{path}: {exc.code} {why}", exc.code) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServeError(f"{self.url}{path}: cannot reach the server ({reason})") from None

    def socket_url(self, stream: str) -> str:
        return "ws" + self.url.removeprefix("http") + f"/v1/streams/{stream}"


def _closed(exc: Exception, stream: str) -> ServeError:
    if isinstance(exc, ConnectionClosed) and exc.rcvd is not None:
        code, reason = exc.rcvd.code, exc.rcvd.reason
        return ServeError(f"stream {stream}: closed by the server ({code}: {reason or 'no reason given'})", code)
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        return ServeError(f"stream {stream}: the server refused the connection (HTTP {status})", status)
    return ServeError(f"stream {stream}: connection lost ({exc or type(exc).__name__})")


def _reply(message: str | bytes) -> dict[str, np.ndarray]:
    if isinstance(message, bytes):
        return decode_npz(message, _REPLY_LIMIT)
    raise ServeError(json.loads(message).get("error", message))


def _ok(message: str | bytes) -> None:
    reply = json.loads(message) if isinstance(message, str) else {}
    if reply.get("ok") is not True:
        raise ServeError(reply.get("error", "unexpected reply"))


class Stream:
    """One stream of a server over its WebSocket (from :meth:`Client.open` or :meth:`Client.stream`)."""

    def __init__(self, id: str, connection: SyncConnection, timeout: float = _TIMEOUT) -> None:  # noqa: A002
        self.id = id
        self._connection = connection
        self._timeout = timeout
        self._exit = contextlib.ExitStack()
        self._exit.push(connection)

    def step(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One step: ``feeds`` by input name (one stream's: 1 along the batch axis) -> outputs.

        Raises:
            ServeError: the server refused the feeds (the stream is unchanged), or the stream ended.
        """
        return _reply(self._exchange(encode_npz(feeds)))

    def reset(self) -> None:
        """Put the stream back at the model's initial state."""
        _ok(self._exchange('{"op": "reset"}'))

    def close(self) -> None:
        """End the stream (its id is unknown to the server from now on) and the connection."""
        _ok(self._exchange('{"op": "close"}'))
        self.disconnect()

    def disconnect(self) -> None:
        """Close the connection; the stream stays in the server, to continue with :meth:`Client.stream`."""
        self._exit.close()

    def _exchange(self, message: str | bytes) -> str | bytes:
        try:
            self._connection.send(message)
            return self._connection.recv(timeout=self._timeout)
        except (WebSocketException, OSError, TimeoutError) as exc:
            raise _closed(exc, self.id) from None

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()


class Client:
    """A blocking client of one ``ortstate serve`` server (``url`` as ``http://host:port``)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = _TIMEOUT) -> None:
        self._http = _Http(url, token, timeout)

    def health(self) -> dict[str, Any]:
        return self._http.call("GET", "/v1/health")

    def model(self) -> dict[str, Any]:
        """The model's inputs (one stream's shapes, null: any size), outputs and variables."""
        return self._http.call("GET", "/v1/model")

    def stats(self) -> dict[str, Any]:
        return self._http.call("GET", "/v1/stats")

    def open(self) -> Stream:
        """A new stream at the model's initial state, connected."""
        return self.stream(self._http.call("POST", "/v1/streams")["id"])

    def stream(self, id: str) -> Stream:  # noqa: A002 - the protocol's word
        """Connect to the open stream ``id`` (it continues where it was)."""
        http = self._http
        try:
            connecting = connect_sync(
                http.socket_url(id),
                additional_headers=http.headers,
                max_size=_REPLY_LIMIT,
                open_timeout=http.timeout,
            )
            connection = connecting.__enter__()  # websockets 17 wants connect() entered, older ones allow it
        except (WebSocketException, OSError, TimeoutError) as exc:
            raise _closed(exc, id) from None
        return Stream(id, connection, http.timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class AsyncStream:
    """:class:`Stream`, for asyncio."""

    def __init__(self, id: str, connection: ClientConnection, timeout: float = _TIMEOUT) -> None:  # noqa: A002
        self.id = id
        self._connection = connection
        self._timeout = timeout

    async def step(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return _reply(await self._exchange(encode_npz(feeds)))

    async def reset(self) -> None:
        _ok(await self._exchange('{"op": "reset"}'))

    async def close(self) -> None:
        _ok(await self._exchange('{"op": "close"}'))
        await self.disconnect()

    async def disconnect(self) -> None:
        await self._connection.close()

    async def _exchange(self, message: str | bytes) -> str | bytes:
        try:
            await self._connection.send(message)
            return await asyncio.wait_for(self._connection.recv(), self._timeout)
        except (WebSocketException, OSError, TimeoutError) as exc:
            raise _closed(exc, self.id) from None

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.disconnect()


class AsyncClient:
    """:class:`Client`, for asyncio (its HTTP calls run in a worker thread)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = _TIMEOUT) -> None:
        self._http = _Http(url, token, timeout)

    async def health(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._http.call, "GET", "/v1/health")

    async def model(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._http.call, "GET", "/v1/model")

    async def stats(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._http.call, "GET", "/v1/stats")

    async def open(self) -> AsyncStream:
        reply = await asyncio.to_thread(self._http.call, "POST", "/v1/streams")
        return await self.stream(reply["id"])

    async def stream(self, id: str) -> AsyncStream:  # noqa: A002
        http = self._http
        try:
            connection = await connect_async(
                http.socket_url(id),
                additional_headers=http.headers,
                max_size=_REPLY_LIMIT,
                open_timeout=http.timeout,
            )
        except (WebSocketException, OSError, TimeoutError) as exc:
            raise _closed(exc, id) from None
        return AsyncStream(id, connection, http.timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

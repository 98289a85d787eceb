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
import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection as SyncConnection
from websockets.sync.client import connect as connect_sync

from ..errors import ServeError
from .codec import decode_npz, encode_npz
from .wire import WireConnection
from .wire import connect as connect_async

__all__ = ["SESSION_HEADER", "AsyncClient", "AsyncStream", "Client", "Stream"]

SESSION_HEADER = "X-Session-Id"
_REPLY_LIMIT = 1 << 30  # outputs the client takes from its server: large, but bounded
_TIMEOUT = 60.0
_RESTART = 1012
LOST = 1006  # ServeError.code of a connection that broke with no word from the server (WebSocket's own)
_FIRST_DELAY, _LAST_DELAY = 0.05, 1.0  # seconds between connecting again


class _Http:
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


def _closed(exc: Exception, stream: str) -> ServeError:
    if isinstance(exc, ConnectionClosed) and exc.rcvd is not None:
        code, reason = exc.rcvd.code, exc.rcvd.reason
        return ServeError(f"stream {stream}: closed by the server ({code}: {reason or 'no reason given'})", code)
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        return ServeError(f"stream {stream}: the server refused the connection (HTTP {status})", status)
    return ServeError(f"stream {stream}: connection lost ({exc or type(exc).__name__})", LOST)


def _again(error: ServeError) -> bool:
    """The server did not act on the message (it is shutting down, or hands the stream over, 1012),
    or refused a connection for now (503 while a server behind a router starts or stops): connect
    again and send it again."""
    return error.code in (_RESTART, 502, 503)


def _lost(error: ServeError) -> bool:
    """The connection broke without a word from the server (it was killed, the network failed):
    whether the last message was acted on is not known."""
    return error.code == LOST


def _after_loss(info: dict[str, Any], steps: int | None, error: ServeError) -> str:
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


class _Retry:
    """Both clients' one retry policy: try again after a retriable error, waiting 0.05 s at first and
    twice as long each time (1 s at most), until ``timeout`` seconds have passed."""

    def __init__(self, timeout: float) -> None:
        self._deadline = time.monotonic() + timeout
        self._delay = _FIRST_DELAY

    def delay(self, error: ServeError, retriable: Callable[[ServeError], bool]) -> float:
        """Seconds to wait before trying again after ``error``; raises it if it is not
        ``retriable`` or the time is up."""
        if not retriable(error) or time.monotonic() + self._delay > self._deadline:
            raise error
        delay, self._delay = self._delay, min(2 * self._delay, _LAST_DELAY)
        return delay


def _reply(message: str | bytes) -> dict[str, np.ndarray]:
    if isinstance(message, bytes):
        return decode_npz(message, _REPLY_LIMIT)
    raise ServeError(json.loads(message).get("error", message))


def _ok(message: str | bytes) -> None:
    reply = json.loads(message) if isinstance(message, str) else {}
    if reply.get("ok") is not True:
        raise ServeError(reply.get("error", "unexpected reply"))


class Stream:
    """One stream of a server over its WebSocket (from :meth:`Client.open` or :meth:`Client.stream`).

    When the server closes the socket without acting on a message (code 1012: it is shutting down,
    or hands the stream to another server behind the same router), the stream connects again and
    sends the message again, for up to ``timeout`` seconds. When the connection breaks during a step
    of a ``--durable`` server (it was killed), the stream waits for the server to come back, asks it
    how many steps the stream has made (``steps``) and either sends the step again (it was not made)
    or fetches the reply it lost (it was): the step is made once, and its outputs come back.
    """

    def __init__(self, id: str, client: Client, steps: int | None = None, durable: bool = False) -> None:  # noqa: A002
        self.id = id
        self.steps = steps  # steps made, as far as this client knows (None: not known)
        self.durable = durable  # the server logs every step: a lost connection is resumed
        self._client = client
        self._exit = contextlib.ExitStack()
        self._connection: SyncConnection | None = None

    def step(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One step: ``feeds`` by input name (one stream's: 1 along the batch axis) -> outputs.

        Raises:
            ServeError: the server refused the feeds (the stream is unchanged), or the stream ended.
        """
        message = encode_npz(feeds)
        try:
            reply = self._exchange(message)
        except ServeError as error:
            if not _lost(error) or not self.durable:
                raise
            reply = self._resume(message, error)
        outputs = _reply(reply)
        if self.steps is not None:
            self.steps += 1
        return outputs

    def _resume(self, message: bytes, error: ServeError) -> str | bytes:
        retry = _Retry(self._client.http.timeout)
        while True:
            try:
                todo = _after_loss(self._client.where(self.id), self.steps, error)
                return self._exchange(message if todo == "again" else '{"op": "last"}')
            except ServeError as again:
                time.sleep(retry.delay(again, _lost))
                error = again

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
        self._connection = None

    def connect(self) -> None:
        """Open the stream's WebSocket (done by the first message if not done before)."""
        self.disconnect()
        http = self._client.http
        try:
            connecting = connect_sync(
                http.socket_url(self.id),
                additional_headers=http.stream_headers(self.id),
                max_size=_REPLY_LIMIT,
                open_timeout=http.timeout,
                compression=None,  # small arrays: compressing costs more than sending
            )
            # websockets 17 wants connect() entered; older ones allow it
            self._connection = self._exit.enter_context(connecting)
        except (WebSocketException, OSError, TimeoutError) as exc:
            raise _closed(exc, self.id) from None

    def _exchange(self, message: str | bytes) -> str | bytes:
        retry = _Retry(self._client.http.timeout)
        while True:
            try:
                if self._connection is None:
                    self.connect()
                assert self._connection is not None
                try:
                    self._connection.send(message)
                    return self._connection.recv(timeout=self._client.http.timeout)
                except (WebSocketException, OSError, TimeoutError) as exc:
                    raise _closed(exc, self.id) from None
            except ServeError as error:
                self.disconnect()
                time.sleep(retry.delay(error, _again))

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()


class Client:
    """A blocking client of one ``ortstate serve`` server (``url`` as ``http://host:port``)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = _TIMEOUT) -> None:
        self.http = _Http(url, token, timeout)

    def health(self) -> dict[str, Any]:
        return self.http.call("GET", "/v1/health")

    def model(self) -> dict[str, Any]:
        """The model's inputs (one stream's shapes, null: any size), outputs and variables."""
        return self.http.call("GET", "/v1/model")

    def stats(self) -> dict[str, Any]:
        """The server's counters (behind a router: those of whichever server answers)."""
        return self.http.call("GET", "/v1/stats")

    def where(self, id: str) -> dict[str, Any]:  # noqa: A002
        """Which server holds stream ``id``, whether it is in memory or parked, and how many steps it
        has made (``steps``, null where not known) on a ``durable`` server or not."""
        return self.http.call("GET", f"/v1/streams/{id}", self.http.stream_headers(id))

    def open(self) -> Stream:
        """A new stream at the model's initial state, connected."""
        reply = self.http.call("POST", "/v1/streams")
        stream = Stream(reply["id"], self, 0, bool(reply.get("durable")))
        stream.connect()
        return stream

    def stream(self, id: str) -> Stream:  # noqa: A002 - the protocol's word
        """Connect to the open stream ``id`` (it continues where it was).

        Raises:
            ServeError: (404) no such stream.
        """
        info = self.where(id)
        stream = Stream(id, self, info.get("steps"), bool(info.get("durable")))
        stream.connect()
        return stream

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class AsyncStream:
    """:class:`Stream`, for asyncio."""

    def __init__(self, id: str, client: AsyncClient, steps: int | None = None, durable: bool = False) -> None:  # noqa: A002
        self.id = id
        self.steps = steps
        self.durable = durable
        self._client = client
        self._connection: WireConnection | None = None

    async def step(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        message = encode_npz(feeds)
        try:
            reply = await self._exchange(message)
        except ServeError as error:
            if not _lost(error) or not self.durable:
                raise
            reply = await self._resume(message, error)
        outputs = _reply(reply)
        if self.steps is not None:
            self.steps += 1
        return outputs

    async def _resume(self, message: bytes, error: ServeError) -> str | bytes:
        retry = _Retry(self._client.http.timeout)
        while True:
            try:
                todo = _after_loss(await self._client.where(self.id), self.steps, error)
                return await self._exchange(message if todo == "again" else '{"op": "last"}')
            except ServeError as again:
                await asyncio.sleep(retry.delay(again, _lost))
                error = again

    async def reset(self) -> None:
        _ok(await self._exchange('{"op": "reset"}'))

    async def close(self) -> None:
        _ok(await self._exchange('{"op": "close"}'))
        await self.disconnect()

    async def disconnect(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.close()

    async def connect(self) -> None:
        await self.disconnect()
        http = self._client.http
        try:
            self._connection = await connect_async(
                http.socket_url(self.id), http.stream_headers(self.id), _REPLY_LIMIT, http.timeout
            )
        except (WebSocketException, OSError, asyncio.TimeoutError) as exc:
            raise _closed(exc, self.id) from None

    async def _exchange(self, message: str | bytes) -> str | bytes:
        retry = _Retry(self._client.http.timeout)
        while True:
            try:
                if self._connection is None:
                    await self.connect()
                assert self._connection is not None
                try:
                    await self._connection.send(message)
                    return await self._connection.recv(self._client.http.timeout)
                except (WebSocketException, OSError, asyncio.TimeoutError) as exc:
                    raise _closed(exc, self.id) from None
            except ServeError as error:
                await self.disconnect()
                await asyncio.sleep(retry.delay(error, _again))

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.disconnect()


class AsyncClient:
    """:class:`Client`, for asyncio (its HTTP calls run in a worker thread)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = _TIMEOUT) -> None:
        self.http = _Http(url, token, timeout)

    async def health(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.http.call, "GET", "/v1/health")

    async def model(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.http.call, "GET", "/v1/model")

    async def stats(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.http.call, "GET", "/v1/stats")

    async def where(self, id: str) -> dict[str, Any]:  # noqa: A002
        return await asyncio.to_thread(self.http.call, "GET", f"/v1/streams/{id}", self.http.stream_headers(id))

    async def open(self) -> AsyncStream:
        reply = await asyncio.to_thread(self.http.call, "POST", "/v1/streams")
        stream = AsyncStream(reply["id"], self, 0, bool(reply.get("durable")))
        await stream.connect()
        return stream

    async def stream(self, id: str) -> AsyncStream:  # noqa: A002
        info = await self.where(id)
        stream = AsyncStream(id, self, info.get("steps"), bool(info.get("durable")))
        await stream.connect()
        return stream

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

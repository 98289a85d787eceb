"""Talking to ``ortstate serve`` from Python, blocking: :class:`Client` hands out streams whose
``step(feeds)`` returns the step's outputs (:mod:`.async_client` has the same for asyncio).

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

import contextlib
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection as SyncConnection
from websockets.sync.client import connect as connect_sync

from ...errors import ServeError
from .client_link import (
    REPLY_LIMIT,
    TIMEOUT,
    Retry,
    ServerHttp,
    after_loss,
    check_ok,
    closed_error,
    reply_outputs,
    was_lost,
    worth_again,
)
from .codec import encode_npz

__all__ = ["Client", "Stream"]


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
            if not was_lost(error) or not self.durable:
                raise
            reply = self._resume(message, error)
        outputs = reply_outputs(reply)
        if self.steps is not None:
            self.steps += 1
        return outputs

    def _resume(self, message: bytes, error: ServeError) -> str | bytes:
        retry = Retry(self._client.http.timeout)
        while True:
            try:
                todo = after_loss(self._client.where(self.id), self.steps, error)
                return self._exchange(message if todo == "again" else '{"op": "last"}')
            except ServeError as again:
                time.sleep(retry.delay(again, was_lost))
                error = again

    def reset(self) -> None:
        """Put the stream back at the model's initial state."""
        check_ok(self._exchange('{"op": "reset"}'))

    def close(self) -> None:
        """End the stream (its id is unknown to the server from now on) and the connection."""
        check_ok(self._exchange('{"op": "close"}'))
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
                max_size=REPLY_LIMIT,
                open_timeout=http.timeout,
                compression=None,  # small arrays: compressing costs more than sending
            )
            # websockets 17 wants connect() entered; older ones allow it
            self._connection = self._exit.enter_context(connecting)
        except (WebSocketException, OSError, TimeoutError) as exc:
            raise closed_error(exc, self.id) from None

    def _exchange(self, message: str | bytes) -> str | bytes:
        retry = Retry(self._client.http.timeout)
        while True:
            try:
                if self._connection is None:
                    self.connect()
                assert self._connection is not None
                try:
                    self._connection.send(message)
                    return self._connection.recv(timeout=self._client.http.timeout)
                except (WebSocketException, OSError, TimeoutError) as exc:
                    raise closed_error(exc, self.id) from None
            except ServeError as error:
                self.disconnect()
                time.sleep(retry.delay(error, worth_again))

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()


class Client:
    """A blocking client of one ``ortstate serve`` server (``url`` as ``http://host:port``)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = TIMEOUT) -> None:
        self.http = ServerHttp(url, token, timeout)

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

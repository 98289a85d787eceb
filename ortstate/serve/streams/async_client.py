"""Talking to ``ortstate serve`` from asyncio: :class:`AsyncClient` and its :class:`AsyncStream`,
as :mod:`.client`'s blocking ones (the same retry policy, :mod:`.client_link`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import numpy as np
from websockets.exceptions import WebSocketException

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
from .wire import WireConnection
from .wire import connect as connect_async

__all__ = ["AsyncClient", "AsyncStream"]


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
            if not was_lost(error) or not self.durable:
                raise
            reply = await self._resume(message, error)
        outputs = reply_outputs(reply)
        if self.steps is not None:
            self.steps += 1
        return outputs

    async def _resume(self, message: bytes, error: ServeError) -> str | bytes:
        retry = Retry(self._client.http.timeout)
        while True:
            try:
                todo = after_loss(await self._client.where(self.id), self.steps, error)
                return await self._exchange(message if todo == "again" else '{"op": "last"}')
            except ServeError as again:
                await asyncio.sleep(retry.delay(again, was_lost))
                error = again

    async def reset(self) -> None:
        check_ok(await self._exchange('{"op": "reset"}'))

    async def close(self) -> None:
        check_ok(await self._exchange('{"op": "close"}'))
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
                http.socket_url(self.id), http.stream_headers(self.id), REPLY_LIMIT, http.timeout
            )
        except (WebSocketException, OSError, asyncio.TimeoutError) as exc:
            raise closed_error(exc, self.id) from None

    async def _exchange(self, message: str | bytes) -> str | bytes:
        retry = Retry(self._client.http.timeout)
        while True:
            try:
                if self._connection is None:
                    await self.connect()
                assert self._connection is not None
                try:
                    await self._connection.send(message)
                    return await self._connection.recv(self._client.http.timeout)
                except (WebSocketException, OSError, asyncio.TimeoutError) as exc:
                    raise closed_error(exc, self.id) from None
            except ServeError as error:
                await self.disconnect()
                await asyncio.sleep(retry.delay(error, worth_again))

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.disconnect()


class AsyncClient:
    """:class:`Client`, for asyncio (its HTTP calls run in a worker thread)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = TIMEOUT) -> None:
        self.http = ServerHttp(url, token, timeout)

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

"""What every answer of the OpenAI app shares, one choice or ``n``: a generation run to its end
unless the client goes first, server-sent events, and the request's place given back on the event
loop however the answer ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse

from ...errors import OrtStateError
from .api import ApiError
from .errors import failed

__all__ = ["event", "run_to_end", "streamed", "unless_gone"]


def event(body: Any) -> bytes:
    """``body`` as one server-sent event."""
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def streamed(
    events: AsyncIterator[bytes], release: Callable[[], Any], headers: dict[str, str] | None = None
) -> StreamingResponse:
    """An answer of server-sent ``events``, never cached or buffered by a proxy; ``release()`` once
    it ends, also when the events never started (a client gone at once)."""
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})},
        background=BackgroundTask(_on_loop, release),
    )


async def _on_loop(release: Callable[[], Any]) -> None:
    """``release()`` on the event loop (Starlette runs a plain function's background task in a
    thread, where the conversations' tasks cannot be made)."""
    release()


async def run_to_end(pieces: AsyncIterator[Any]) -> None:
    """Take every piece of a generation (one choice's, or ``n``'s).

    Raises:
        ApiError: 500 naming a log id, the engine could not run it.
    """
    try:
        async for _ in pieces:
            pass
    except OrtStateError as exc:
        raise failed(exc) from None


async def unless_gone(request: Request, work: Awaitable[None]) -> None:
    """Await ``work``, cancelling it if the client disconnects first (its body is read already, so
    the next message is the disconnect).

    Raises:
        ApiError: 499, the client went away.
    """
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this request itself is cancelled (the server stopping)
        watch.cancel()
        task.cancel()
        raise
    watch.cancel()
    if not task.done():  # the client went first: its generation ends (the batcher drops it)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ApiError("the client went away", 499)
    task.result()

"""A server app's lifespan: what it holds is parked every so often while it serves, once idle for a
while, and all of it when it stops (the stream server's streams, the LLM server's conversations)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette

from ..errors import OrtStateError

__all__ = ["parking_lifespan"]

logger = logging.getLogger("ortstate.serve")


def parking_lifespan(
    park_idle: Callable[[float], Awaitable[Any]],
    park_all: Callable[[], Awaitable[Any]],
    idle_park: float | None,
    what: str,
    errors: tuple[type[BaseException], ...] = (OrtStateError,),
) -> Any:
    """A server app's lifespan: ``park_idle(idle_park)`` every so often while it serves (one of
    ``errors``, a full disk, is logged and tried again later), ``park_all()`` when it stops.
    ``what`` names what is parked, for the log (the stream server's and the LLM server's)."""

    async def parker() -> None:
        assert idle_park is not None
        while True:
            await asyncio.sleep(min(max(idle_park / 2, 0.05), 1.0))
            try:
                await park_idle(idle_park)
            except errors as exc:  # they stay in memory; try again later
                logger.warning("ortstate serve: cannot park idle %s: %s", what, exc)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(parker()) if idle_park is not None else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await park_all()

    return lifespan

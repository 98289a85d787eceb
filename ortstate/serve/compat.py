"""What the server and its clients need from asyncio on every supported Python (3.10 up): where
3.11 added a cheaper or simpler way, 3.11 and later use it and 3.10 gets the older equivalent."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["run_with", "within"]

T = TypeVar("T")


def run_with(main: Coroutine[Any, Any, T], loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> T:
    """``asyncio.run(main)`` on a loop ``loop_factory`` makes (3.10's ``asyncio.run`` takes no
    factory and 3.11's ``asyncio.Runner`` is not there: its steps are done here instead)."""
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(main)
    loop = loop_factory()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """``await awaitable``, or ``asyncio.TimeoutError`` after ``seconds`` (without the task
    ``asyncio.wait_for`` makes per call on Python 3.11; 3.10 has no ``asyncio.timeout``)."""
    if sys.version_info < (3, 11):
        return await asyncio.wait_for(awaitable, seconds)
    async with asyncio.timeout(seconds):
        return await awaitable

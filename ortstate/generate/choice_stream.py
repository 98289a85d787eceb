"""What :meth:`~ortstate.generate.ContinuousBatcher.stream_choices` returns: the ``n`` choices'
``(choice, token)`` as they are picked, and a way to end one choice early (a server cuts a choice at
a stop string: its request stops at the engine's next tick instead of running on unread)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

__all__ = ["ChoiceStream"]


class ChoiceStream:
    """An async iterator of ``(choice, item)``; :meth:`cancel` ends one choice (its request gets no
    more tokens; the others go on). ``aclose()`` ends them all, as leaving the iteration does."""

    def __init__(self, items: AsyncIterator[Any], rids: Callable[[], Sequence[int]], cancel: Callable[[int], None]):
        self._items = items
        self._rids = rids  # the choices' request ids (known once the engine took them)
        self._cancel = cancel

    def __aiter__(self) -> ChoiceStream:
        return self

    async def __anext__(self) -> Any:
        return await self._items.__anext__()

    async def aclose(self) -> None:
        await self._items.aclose()  # type: ignore[attr-defined]

    def cancel(self, choice: int) -> None:
        """End choice ``choice`` at the engine's next tick (calling it again, or after it ended, does nothing)."""
        self._cancel(self._rids()[choice])

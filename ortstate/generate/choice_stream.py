"""What :meth:`~ortstate.generate.ContinuousBatcher.stream` returns (a :class:`TokenStream`: each new
token as it is picked, and how many of the prompt's tokens were cached), and what
:meth:`~ortstate.generate.ContinuousBatcher.stream_choices` returns (a :class:`ChoiceStream`: the
``n`` choices' ``(choice, token)``, and a way to end one choice early: a server cuts a choice at a
stop string, its request stops at the engine's next tick instead of running on unread)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

__all__ = ["ChoiceStream", "TokenStream"]


class TokenStream:
    """An async iterator of a generation's items; ``aclose()`` ends it, as leaving the iteration does.

    Attributes:
        cached_tokens: how many of the prompt's tokens its stream held when it started (a kept
            stream's, or the prefix cache's), so that only the rest was fed: set before its first
            item (0 until then), as vLLM's ``num_cached_tokens``.
    """

    def __init__(self, items: Callable[[Callable[[int], None]], AsyncIterator[Any]]) -> None:
        self.cached_tokens = 0
        self._items = items(self.started)  # its items, made with what tells it the cached tokens

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> Any:
        return await self._items.__anext__()

    async def aclose(self) -> None:
        await self._items.aclose()  # type: ignore[attr-defined]

    def started(self, cached: int) -> None:
        """(The engine's, in the pool's loop.) Its stream holds ``cached`` of the prompt's tokens."""
        self.cached_tokens = cached


class ChoiceStream(TokenStream):
    """A :class:`TokenStream` of ``(choice, item)``; :meth:`cancel` ends one choice (its request gets
    no more tokens; the others go on)."""

    def __init__(
        self,
        items: Callable[[Callable[[int], None]], AsyncIterator[Any]],
        rids: Callable[[], Sequence[int]],
        cancel: Callable[[int], None],
    ) -> None:
        super().__init__(items)
        self._rids = rids  # the choices' request ids (known once the engine took them)
        self._cancel = cancel

    def cancel(self, choice: int) -> None:
        """End choice ``choice`` at the engine's next tick (calling it again, or after it ended, does nothing)."""
        self._cancel(self._rids()[choice])

"""A stream of a :class:`~.continuous.ContinuousBatcher`'s pool kept open between generations (a
conversation's cache), and what a generation on it reuses and leaves."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import GenerationError, StateError

if TYPE_CHECKING:
    from ..streams import KvPool

__all__ = ["KeptStream", "load_kept"]


@dataclass
class KeptStream:
    """A stream of the pool kept open between generations (a conversation's cache).

    Attributes:
        sid: the pool's stream.
        tokens: what its cache holds: the first ``len(tokens)`` positions (prompts and generated
            tokens as they were fed; a generation's last token is never fed).
        busy: a generation runs on it (from :meth:`claim` until the pool's loop ends it, see
            :meth:`release`).
    """

    sid: int
    tokens: list[int] = field(default_factory=list)
    busy: bool = False

    def reuses(self, prompt: Sequence[int]) -> int:
        """How many of ``prompt``'s tokens its cache holds already: all it holds if they start the
        prompt and leave at least one token to feed, else 0 (it is emptied and fed again)."""
        held = self.tokens
        return len(held) if len(held) < len(prompt) and list(prompt[: len(held)]) == held else 0

    def claim(self) -> None:
        """Mark it busy for a generation about to be queued.

        Raises:
            GenerationError: it is busy with another generation.
        """
        if self.busy:
            raise GenerationError(f"kept stream {self.sid} is busy with another generation")
        self.busy = True

    def release(self, fed: Sequence[int], length: int) -> None:
        """The generation on it ended (in the pool's loop): its cache holds the first ``length`` of
        the tokens ``fed`` to it (the prompt, then the new tokens); it is idle again."""
        self.tokens = list(fed[:length])
        self.busy = False


def load_kept(pool: KvPool, path: str | os.PathLike[str], count: int) -> int:
    """(In the pool's loop.) The stream ``pool`` loads from ``path``, once it holds ``count`` positions.

    Raises:
        StateError: the snapshot is not one of this model's, or holds another number of positions.
    """
    sid = pool.load(path)
    held = pool.length(sid)
    if held != count:
        pool.close(sid)
        raise StateError(f"{path}: its caches hold {held} positions, its tokens are {count}")
    return sid

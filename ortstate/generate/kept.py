"""A stream of a :class:`~.continuous.ContinuousBatcher`'s pool kept open between generations (a
conversation's cache), and what a generation on it reuses and leaves."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import GenerationError

__all__ = ["KeptStream"]


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

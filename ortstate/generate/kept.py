"""A stream of a :class:`~.continuous.ContinuousBatcher`'s pool kept open between generations (a
conversation's cache), and how a request continues it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import GenerationError
from .request import Request

__all__ = ["KeptStream"]


@dataclass
class KeptStream:
    """A stream of the pool kept open between generations (a conversation's cache).

    Attributes:
        sid: the pool's stream.
        tokens: what its cache holds: the first ``len(tokens)`` positions (prompts and generated
            tokens as they were fed; a generation's last token is never fed).
        busy: a generation runs on it (set from the engine's thread when it ends).
    """

    sid: int
    tokens: list[int] = field(default_factory=list)
    busy: bool = False

    def reuses(self, prompt: Sequence[int]) -> int:
        """How many of ``prompt``'s tokens its cache holds already: all it holds if they start the
        prompt and leave at least one token to feed, else 0 (it is emptied and fed again)."""
        held = self.tokens
        return len(held) if len(held) < len(prompt) and list(prompt[: len(held)]) == held else 0

    def attach(self, request: Request, length: Callable[[int], int]) -> None:
        """Make ``request`` run on this stream (busy until it ends), feeding only what its cache
        lacks; ``length(sid)`` says how many positions the pool's stream holds.

        Raises:
            GenerationError: the stream is busy with another generation.
        """
        if self.busy:
            raise GenerationError(f"kept stream {self.sid} is busy with another generation")
        request.fed = self.reuses(request.prompt)
        request.sid, request.keep, request.reset_first = self.sid, True, request.fed == 0 and bool(self.tokens)
        self.busy = True
        if request.reset_first:
            self.tokens = []

        def ended(r: Request) -> None:  # in the engine's thread: the stream is idle again
            self.tokens = (r.prompt + r.tokens)[: length(self.sid)]
            self.busy = False

        request.on_end = ended

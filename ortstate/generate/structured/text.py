"""An engine's message as one line of an error (a client may read it: bounded, whitespace folded)."""

from __future__ import annotations

__all__ = ["one_line"]


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."

"""Progress of long work (converting a real-size model, a bench's rounds, a verify's steps): a bar
with counts and an estimate on a terminal, nothing anywhere else.

Library code says what it does, ``with task("translating layers", total=n) as bar: ...
bar.update()``, and shows nothing by itself: the command line turns the display on with
:func:`shown` (stderr, when it is a terminal). The bar is tqdm's when tqdm is installed (it is no
dependency of ortstate), else a plain one of the same kind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TextIO

__all__ = ["Bar", "shown", "task"]


class Bar:
    """One task's count; shows nothing (what runs when no display is on)."""

    def update(self, n: int = 1) -> None:
        """``n`` more done."""

    def close(self) -> None:
        """The task ended."""


class _PlainBar(Bar):
    """``ortstate: translating layers 120/336 (36%) 1.2 s, ~2.1 s left``, rewritten in place at
    most ten times a second, on a terminal."""

    def __init__(self, stream: TextIO, name: str, total: int | None) -> None:
        self.stream, self.name, self.total = stream, name, total
        self.done = 0
        self.start = self.shown = time.monotonic()
        self._draw()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.shown >= 0.1 or (self.total is not None and self.done >= self.total):
            self.shown = now
            self._draw()

    def close(self) -> None:
        self._draw()
        self.stream.write("\n")
        self.stream.flush()

    def _draw(self) -> None:
        spent = time.monotonic() - self.start
        if self.total:
            left = spent / self.done * (self.total - self.done) if self.done else None
            guess = f", ~{left:.1f} s left" if left is not None and self.done < self.total else ""
            text = f"{self.done}/{self.total} ({100 * self.done // self.total}%) {spent:.1f} s{guess}"
        else:
            text = f"{self.done} {spent:.1f} s"
        self.stream.write(f"\rortstate: {self.name} {text}\033[K")
        self.stream.flush()


class _TqdmBar(Bar):
    def __init__(self, stream: TextIO, name: str, total: int | None) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=f"ortstate: {name}", file=stream, leave=True, dynamic_ncols=True)

    def update(self, n: int = 1) -> None:
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


_display: ContextVar[Callable[[str, int | None], Bar] | None] = ContextVar("ortstate_progress", default=None)


@contextlib.contextmanager
def task(name: str, total: int | None = None) -> Iterator[Bar]:
    """A task of ``total`` units (None: not known), shown while the ``with`` block runs if a
    display is on (:func:`shown`)."""
    make = _display.get()
    bar = Bar() if make is None else make(name, total)
    try:
        yield bar
    finally:
        bar.close()


@contextlib.contextmanager
def shown(stream: TextIO | None = None, plain: bool = False) -> Iterator[None]:
    """Show the tasks that run inside the ``with`` block on ``stream`` (stderr), if it is a terminal;
    tqdm's bars unless ``plain`` or tqdm is not installed."""
    stream = sys.stderr if stream is None else stream
    if not _is_terminal(stream):
        yield
        return
    kind: Any = _PlainBar if plain or importlib.util.find_spec("tqdm") is None else _TqdmBar
    token = _display.set(lambda name, total: kind(stream, name, total))
    try:
        yield
    finally:
        _display.reset(token)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed, or no such method
        return False

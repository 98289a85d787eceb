"""Ctrl-C during a run: raised in the caller after the run, with no variable changed.

Python runs signal handlers in the main thread, between two bytecodes of whatever Python code runs
there. During a custom-op run that code is a state op called from inside ONNX Runtime, and a
``KeyboardInterrupt`` raised there escapes into onnxruntime-extensions, which aborts the process.
So a custom-op run in the main thread swaps the SIGINT handler for one that only records the
signal (:func:`defer_sigint`), and afterwards puts the original back and calls it
(:func:`resume_sigint`): the default handler raises ``KeyboardInterrupt`` there, before the run's
writes are committed.

The explicit form runs no Python inside ONNX Runtime; a signal that arrived during its run is
handled at the first Python call after it, which :func:`checkpoint` places before the commit.

Only SIGINT is deferred (Python installs a raising handler for it by default); an application's
own raising handlers for other signals can still fire inside a custom-op run.
"""

from __future__ import annotations

import _signal  # the functions behind ``signal``, whose wrappers convert to enums on every call (slow, per run)
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["checkpoint", "defer_sigint", "deliver", "resume_sigint"]

_SIGINT = _signal.SIGINT
_MAIN = threading.main_thread().ident
_get_ident, _getsignal, _setsignal = threading.get_ident, _signal.getsignal, _signal.signal
_received: list[int] = []


def _record(signum: int, frame: Any) -> None:
    _received.append(signum)


def defer_sigint() -> Callable[..., Any] | None:
    """Before a run: make SIGINT only recorded. Returns the handler to give back to
    :func:`resume_sigint`, or None when no Python handler could run during the run (another
    thread, or SIGINT ignored or left to the OS). A SIGINT already pending is handled here, before
    the run starts."""
    if _get_ident() != _MAIN:
        return None
    handler = _getsignal(_SIGINT)
    if handler is _record or not callable(handler):
        return None
    if _received:
        _received.clear()
    _setsignal(_SIGINT, _record)
    return handler


def resume_sigint(handler: Callable[..., Any] | None) -> bool:
    """After a run: put ``handler`` back; True if SIGINT arrived meanwhile (see :func:`deliver`)."""
    if handler is None:
        return False
    _setsignal(_SIGINT, handler)  # runs _record for a signal still pending, before the swap
    return bool(_received)


def deliver(handler: Callable[..., Any]) -> None:
    """Call the handler for the SIGINT that arrived during the run (the default one raises
    ``KeyboardInterrupt``)."""
    _received.clear()
    handler(_SIGINT, None)


def checkpoint() -> None:
    """A Python call: a signal received while ONNX Runtime ran is handled here (on the main
    thread), so its ``KeyboardInterrupt`` is raised before the caller commits anything."""

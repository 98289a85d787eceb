"""What every pool checks alike of the arguments it is given, before it touches a stream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import OrtStateError, RunError

__all__ = ["check_logits", "check_slots", "check_step"]


def check_slots(slots: Any) -> None:
    """Raise OrtStateError unless ``slots`` is a positive integer."""
    if type(slots) is not int or slots < 1:
        raise OrtStateError(f"slots must be a positive integer, got {slots!r}")


def check_logits(logits: Any) -> None:
    """Raise OrtStateError unless ``logits`` is "all" or "last" (a KV pool's steps)."""
    if logits != "all" and logits != "last":
        raise OrtStateError(f"logits must be 'all' or 'last', not {logits!r}")


def check_step(feeds: Any, errors: str) -> None:
    """Raise unless ``feeds`` maps stream ids to feeds and ``errors`` is "raise" or "return" (checked
    on every step: a dict costs one type test).

    Raises:
        OrtStateError: ``errors`` is neither; RunError: ``feeds`` is not a mapping.
    """
    if errors != "raise" and errors != "return":
        raise OrtStateError(f"errors must be 'raise' or 'return', not {errors!r}")
    if type(feeds) is not dict and not isinstance(feeds, Mapping):
        raise RunError(f"step takes a mapping of stream ids to feeds, not {type(feeds).__name__}")

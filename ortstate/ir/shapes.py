"""Partial shapes as OpenVINO writes them: ``1,?,3``, ``-1``, ``1..10``, ``..10``, ``3..``, ``...``."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MAX_DIM", "Dim", "PartialShape", "parse_dim", "parse_partial_shape", "parse_static_shape"]


@dataclass(frozen=True)
class Dim:
    """One dimension: static when ``lo == hi``; ``hi is None`` means unbounded."""

    lo: int = 0
    hi: int | None = None

    @property
    def is_static(self) -> bool:
        return self.hi is not None and self.lo == self.hi

    def relaxes(self, other: Dim) -> bool:
        """True if every value ``other`` admits is admitted by ``self``."""
        if other.lo < self.lo:
            return False
        if self.hi is None:
            return True
        return other.hi is not None and other.hi <= self.hi

    def __str__(self) -> str:
        if self.is_static:
            return str(self.lo)
        if self.lo == 0 and self.hi is None:
            return "?"
        return f"{self.lo or ''}..{'' if self.hi is None else self.hi}"


@dataclass(frozen=True)
class PartialShape:
    """A shape whose rank may be unknown (``dims is None``) and whose dims may be ranges."""

    dims: tuple[Dim, ...] | None

    @property
    def rank(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    @property
    def is_static(self) -> bool:
        return self.dims is not None and all(d.is_static for d in self.dims)

    def to_list(self) -> list[int] | None:
        """Static dims as ints, dynamic ones as -1; None for a dynamic rank."""
        if self.dims is None:
            return None
        return [d.lo if d.is_static else -1 for d in self.dims]

    def relaxes(self, other: PartialShape) -> bool:
        """True if every shape ``other`` admits is admitted by ``self``."""
        if self.dims is None:
            return True
        if other.dims is None or len(other.dims) != len(self.dims):
            return False
        return all(a.relaxes(b) for a, b in zip(self.dims, other.dims))

    def __str__(self) -> str:
        if self.dims is None:
            return "..."
        return "[" + ",".join(str(d) for d in self.dims) + "]"


DYNAMIC = PartialShape(None)

# OpenVINO dimensions are int64; anything larger cannot come from a real model.
MAX_DIM = 2**63 - 1


def _bound(text: str, whole: str) -> int:
    text = text.strip()
    if not whole.strip():
        raise ValueError("empty dimension")
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ValueError(f"{whole.strip()!r} is not a dimension")
    value = int(text)
    if value < 0:
        raise ValueError(f"negative dimension {value}")
    if value > MAX_DIM:
        raise ValueError(f"dimension {value} is larger than int64")
    return value


def parse_dim(text: str) -> Dim:
    """Parse one dimension: ``3``, ``?``, ``-1``, ``1..10``, ``..10``, ``3..``. Raises ValueError."""
    stripped = text.strip()
    if stripped in ("?", "-1"):
        return Dim()
    if ".." not in stripped:
        value = _bound(stripped, text)
        return Dim(value, value)
    lo_s, hi_s = stripped.split("..", 1)
    # OpenVINO writes -1 for a missing bound in some places ("-1..5", "1..-1").
    lo = 0 if lo_s.strip() in ("", "-1") else _bound(lo_s, text)
    hi = None if hi_s.strip() in ("", "-1") else _bound(hi_s, text)
    if hi is not None and hi < lo:
        raise ValueError(f"empty dimension range {stripped!r}")
    return Dim(lo, hi)


def parse_partial_shape(text: str) -> PartialShape:
    """Parse a shape attribute. Empty means a scalar, ``...`` a dynamic rank.

    Raises:
        ValueError: a part is not a dimension, is negative, larger than int64 or an empty range.
    """
    text = text.strip()
    if text == "...":
        return DYNAMIC
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    if not text:
        return PartialShape(())
    return PartialShape(tuple(parse_dim(part) for part in text.split(",")))


def parse_static_shape(text: str) -> tuple[int, ...]:
    """Parse a shape that must be static (a Const's).

    Raises:
        ValueError: the shape is malformed (see :func:`parse_partial_shape`) or not static.
    """
    shape = parse_partial_shape(text)
    if not shape.is_static:
        raise ValueError(f"shape {shape} is not static")
    return tuple(d.lo for d in shape.dims or ())

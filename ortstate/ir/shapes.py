"""Partial shapes as OpenVINO writes them: ``1,?,3``, ``-1``, ``1..10``, ``..10``, ``3..``, ``...``."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Dim", "PartialShape", "parse_partial_shape", "parse_static_shape"]


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


def _parse_dim(text: str) -> Dim:
    text = text.strip()
    if text in ("?", "-1"):
        return Dim()
    if ".." in text:
        lo_s, hi_s = text.split("..", 1)
        lo = int(lo_s) if lo_s.strip() else 0
        hi = int(hi_s) if hi_s.strip() else None
        if lo < 0 or (hi is not None and (hi < lo)):
            raise ValueError(f"bad dimension range {text!r}")
        return Dim(lo, hi)
    value = int(text)
    if value < 0:
        raise ValueError(f"negative dimension {text!r}")
    return Dim(value, value)


def parse_partial_shape(text: str) -> PartialShape:
    """Parse a shape attribute. Empty means a scalar, ``...`` a dynamic rank. Raises ValueError."""
    text = text.strip()
    if text in ("...", "?..."):
        return DYNAMIC
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    if not text:
        return PartialShape(())
    return PartialShape(tuple(_parse_dim(part) for part in text.split(",")))


def parse_static_shape(text: str) -> tuple[int, ...]:
    """Parse a shape that must be static (a Const's). Raises ValueError."""
    shape = parse_partial_shape(text)
    if not shape.is_static:
        raise ValueError(f"shape {text!r} is not static")
    return tuple(d.lo for d in shape.dims or ())

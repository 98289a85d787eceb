"""How the CLI shows things: aligned tables, array summaries, shapes, progress on stderr."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["array_summary", "count", "format_dims", "format_error", "natural_key", "progress", "table"]


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  ") -> str:
    """Left-aligned columns separated by two spaces."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(len(header))]
    lines = [indent + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def format_dims(dims: Sequence[Any] | None) -> str:
    """``[1,?,8]``; None (dynamic rank) reads ``[...]``."""
    if dims is None:
        return "[...]"
    return "[" + ",".join("?" if d is None or isinstance(d, str) or d == -1 else str(d) for d in dims) + "]"


def format_error(value: float) -> str:
    if value == 0:
        return "0"
    if value == float("inf"):
        return "inf"
    return f"{value:.1e}"


def array_summary(value: np.ndarray) -> list[str]:
    """[dtype, shape, min, max, mean] as strings (min/max/mean blank when empty or not numeric)."""
    value = np.asarray(value)
    stats = ["", "", ""]
    if value.size and value.dtype.kind in "biuf":
        data = value.astype(np.float64)
        stats = [f"{data.min():.6g}", f"{data.max():.6g}", f"{data.mean():.6g}"]
    return [str(value.dtype), format_dims(value.shape), *stats]


def progress(message: str) -> None:
    """Progress for slow steps: on stderr, and only for a person watching a terminal."""
    if sys.stderr.isatty():
        print(f"ortstate: {message}...", file=sys.stderr, flush=True)


def count(n: int, noun: str) -> str:
    """``1 step``, ``3 steps``."""
    return f"{n} {noun}{'s' * (n != 1)}"


def natural_key(name: str) -> tuple:
    """Sort key reading digit runs as numbers (``kv.2`` before ``kv.10``): the one order every command
    lists variables in."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part)

"""Which shapes a variable's metadata shape admits (checked on every state a model writes), and
that shape as OpenVINO writes it in errors."""

from __future__ import annotations

import operator
from collections.abc import Sequence

__all__ = ["ShapeRule", "show_shape"]


class ShapeRule:
    """Which concrete shapes a metadata partial shape (see ``VariableMeta.shape``) admits, compiled
    once: every state a model writes is checked, and KV caches change shape every step."""

    __slots__ = ("bounds", "rank", "static_dims", "static_values", "statics")

    def __init__(self, shape: list | None) -> None:
        self.rank = None if shape is None else len(shape)
        self.statics = tuple((i, d) for i, d in enumerate(shape or []) if isinstance(d, int))
        # the static dims picked out of a shape in one C call (a KV cache's shape changes every step)
        axes = [i for i, _ in self.statics]
        self.static_dims = operator.itemgetter(*axes) if len(axes) > 1 else (lambda s: (s[axes[0]],) if axes else ())
        self.static_values = tuple(d for _, d in self.statics) if len(axes) != 1 else (self.statics[0][1],)
        # [lo, hi] dims that restrict anything (``[0, None]`` admits every size)
        self.bounds = tuple(
            (i, d[0], d[1]) for i, d in enumerate(shape or []) if not isinstance(d, int) and (d[0] or d[1] is not None)
        )

    def lengths(self, shape: Sequence[int], axis: int) -> tuple[int, float] | None:
        """The sizes along ``axis`` (lowest, highest: ``inf`` for no bound) a value of ``shape``'s
        other dims may have; None where those dims are not admitted."""
        if self.rank is None:
            return 0, float("inf")
        if len(shape) != self.rank:
            return None
        lo, hi = 0, float("inf")
        for i, d in self.statics:
            if i == axis:
                lo = hi = d
            elif shape[i] != d:
                return None
        for i, low, high in self.bounds:
            if i == axis:
                lo, hi = max(lo, low or 0), min(hi, float("inf") if high is None else high)
            elif shape[i] < low or (high is not None and shape[i] > high):
                return None
        return lo, hi

    def admits(self, actual: tuple[int, ...]) -> bool:
        if self.rank is None:
            return True
        if len(actual) != self.rank:
            return False
        if self.static_dims(actual) != self.static_values:
            return False
        for i, lo, hi in self.bounds:
            if actual[i] < lo or (hi is not None and actual[i] > hi):
                return False
        return True


def show_shape(shape: list | None) -> str:
    """A metadata shape as OpenVINO writes it: ``[1,?,2..8]``."""
    if shape is None:
        return "[...]"

    def dim(d: int | list) -> str:
        if isinstance(d, int):
            return str(d)
        lo, hi = d
        return "?" if not lo and hi is None else f"{lo or ''}..{'' if hi is None else hi}"

    return "[" + ",".join(dim(d) for d in shape) + "]"

"""SoftMax and LogSoftmax along one axis (ONNX Softmax-13 and later normalise one axis too)."""

from __future__ import annotations

from ..context import Context, Node
from ..kernels import ORT_FLOATS, float_math
from ..registry import translator


def _axis(node: Node, allow_negative: bool) -> int:
    axis = node.attr_int("axis", 1)
    rank = node.input_rank(0)
    low = -rank if allow_negative else 0
    if not low <= axis < max(rank, 1):
        raise node.error(f"axis {axis} is out of range [{low}, {max(rank, 1) - 1}] for rank {rank}")
    return axis


@translator("SoftMax", 1)
def softmax_v1(node: Node, ctx: Context) -> list[str]:
    """SoftMax-1: ``axis`` (default 1) must be non-negative -> Softmax ``axis``."""
    return [float_math(node, ctx, "Softmax", ORT_FLOATS, {"axis": _axis(node, allow_negative=False)})]


@translator("SoftMax", 8)
def softmax_v8(node: Node, ctx: Context) -> list[str]:
    """SoftMax-8: ``axis`` in [-rank, rank) -> Softmax ``axis``."""
    return [float_math(node, ctx, "Softmax", ORT_FLOATS, {"axis": _axis(node, allow_negative=True)})]


@translator("LogSoftmax", 5)
def log_softmax_v5(node: Node, ctx: Context) -> list[str]:
    """LogSoftmax-5: ``axis`` in [-rank, rank) -> LogSoftmax ``axis``."""
    return [float_math(node, ctx, "LogSoftmax", ORT_FLOATS, {"axis": _axis(node, allow_negative=True)})]

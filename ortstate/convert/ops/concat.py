"""Concat."""

from __future__ import annotations

from ..context import Context, Node
from ..registry import translator


@translator("Concat", 1)
def concat_v1(node: Node, ctx: Context) -> list[str]:
    """Concat-1 -> Concat; ``axis`` may be negative in both."""
    return [ctx.b.op("Concat", node.inputs, {"axis": node.attr_int("axis")})]

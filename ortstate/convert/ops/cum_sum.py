"""CumSum."""

from __future__ import annotations

from ..context import Context, Node
from ..int64 import i64
from ..registry import translator


@translator("CumSum", 3)
def cum_sum_v3(node: Node, ctx: Context) -> list[str]:
    """CumSum-3 (data[, axis]; ``exclusive``, ``reverse``) -> CumSum with the same attributes; axis defaults to 0."""
    axis = node.inputs[1] if len(node.inputs) > 1 else i64(ctx, 0)
    attrs = {"exclusive": int(node.attr_bool("exclusive", False)), "reverse": int(node.attr_bool("reverse", False))}
    return [ctx.b.op("CumSum", [node.inputs[0], axis], attrs)]

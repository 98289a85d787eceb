"""Comparisons and logic, with numpy broadcasting: Equal, NotEqual, Less, LessEqual, Greater,
GreaterEqual, LogicalAnd, LogicalOr, LogicalXor, LogicalNot, Select.
"""

from __future__ import annotations

from onnx import TensorProto as T

from ..context import Context, Node
from ..kernels import (
    check_broadcast,
    element_wise,
    scalar,
)
from ..registry import translator


@translator("Equal", 1)
def equal_v1(node: Node, ctx: Context) -> list[str]:
    """Equal-1 -> Equal (numpy broadcasting in both)."""
    return element_wise(node, ctx, "Equal")


@translator("NotEqual", 1)
def not_equal_v1(node: Node, ctx: Context) -> list[str]:
    """NotEqual-1 -> Not(Equal) (ONNX has no NotEqual)."""
    check_broadcast(node)
    return [ctx.b.op("Not", [ctx.b.op("Equal", node.inputs[:2])])]


@translator("Less", 1)
def less_v1(node: Node, ctx: Context) -> list[str]:
    """Less-1 -> Less (numpy broadcasting in both)."""
    return element_wise(node, ctx, "Less")


@translator("LessEqual", 1)
def less_equal_v1(node: Node, ctx: Context) -> list[str]:
    """LessEqual-1 -> LessOrEqual (numpy broadcasting in both)."""
    return element_wise(node, ctx, "LessOrEqual")


@translator("Greater", 1)
def greater_v1(node: Node, ctx: Context) -> list[str]:
    """Greater-1 -> Greater (numpy broadcasting in both)."""
    return element_wise(node, ctx, "Greater")


@translator("GreaterEqual", 1)
def greater_equal_v1(node: Node, ctx: Context) -> list[str]:
    """GreaterEqual-1 -> GreaterOrEqual (numpy broadcasting in both)."""
    return element_wise(node, ctx, "GreaterOrEqual")


@translator("LogicalAnd", 1)
def logical_and_v1(node: Node, ctx: Context) -> list[str]:
    """LogicalAnd-1 -> And (numpy broadcasting in both)."""
    return element_wise(node, ctx, "And")


@translator("LogicalOr", 1)
def logical_or_v1(node: Node, ctx: Context) -> list[str]:
    """LogicalOr-1 -> Or (numpy broadcasting in both)."""
    return element_wise(node, ctx, "Or")


@translator("LogicalXor", 1)
def logical_xor_v1(node: Node, ctx: Context) -> list[str]:
    """LogicalXor-1 -> Xor (numpy broadcasting in both)."""
    return element_wise(node, ctx, "Xor")


@translator("LogicalNot", 1)
def logical_not_v1(node: Node, ctx: Context) -> list[str]:
    """LogicalNot-1 -> Not. OpenVINO also accepts numbers (x == 0, in the input's type); ONNX Not is bool only."""
    etype = node.onnx_input_type(0)
    if etype == T.BOOL:
        return [ctx.b.op("Not", [node.inputs[0]])]
    is_zero = ctx.b.op("Equal", [node.inputs[0], scalar(ctx, 0, etype)])
    return [ctx.b.op("Cast", [is_zero], {"to": etype})]


# -- Select, OneHot ----------------------------------------------------------------------------
@translator("Select", 1)
def select_v1(node: Node, ctx: Context) -> list[str]:
    """Select-1 (cond, then, else) -> Where; ``auto_broadcast`` numpy is ONNX's broadcast, none needs none."""
    node.attr_choice("auto_broadcast", ("numpy", "none"), "numpy")  # both are Where: "none" has equal shapes
    return [ctx.b.where(*node.inputs[:3], node.onnx_output_type())]

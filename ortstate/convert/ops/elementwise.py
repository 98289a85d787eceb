"""Element-wise binary ops with numpy broadcasting: arithmetic, comparison, logical."""

from __future__ import annotations

from ..context import Context, Node
from ..registry import translator

# OpenVINO type -> ONNX op, for ops that map one to one.
_BINARY = {
    "Add": "Add",
    "Subtract": "Sub",
    "Multiply": "Mul",
    "Maximum": "Max",
    "Minimum": "Min",
    "Equal": "Equal",
    "Less": "Less",
    "LessEqual": "LessOrEqual",
    "Greater": "Greater",
    "GreaterEqual": "GreaterOrEqual",
    "LogicalAnd": "And",
    "LogicalOr": "Or",
    "LogicalXor": "Xor",
}


def _check_broadcast(node: Node) -> None:
    mode = node.attr("auto_broadcast", "numpy").lower()
    if mode not in ("numpy", "none"):
        raise node.error(f"auto_broadcast={mode} is not supported (expected numpy or none)")


def _binary(onnx_op: str):  # noqa: ANN202
    def translate(node: Node, ctx: Context) -> list[str]:
        _check_broadcast(node)
        return [ctx.b.op(onnx_op, node.inputs[:2])]

    translate.__name__ = f"{onnx_op.lower()}_v1"
    return translate


for _ov, _onnx in _BINARY.items():
    translator(_ov, 1)(_binary(_onnx))

"""Convert: element type conversion."""

from __future__ import annotations

from onnx import TensorProto

from ..context import Context, Node
from ..dtypes import onnx_type
from ..registry import translator


@translator("Convert", 1)
def convert_v1(node: Node, ctx: Context) -> list[str]:
    """Convert-1 -> Cast (OpenVINO ``destination_type`` -> ONNX ``to``).

    bf16 is carried as f32 (see dtypes), so a conversion to bf16 rounds through a BFLOAT16 Cast.
    """
    destination = node.attr_type("destination_type")
    target = onnx_type(destination, node.where)
    if destination.name == "bf16":
        rounded = ctx.b.op("Cast", [node.inputs[0]], {"to": TensorProto.BFLOAT16})
        return [ctx.b.op("Cast", [rounded], {"to": target})]
    return [ctx.b.op("Cast", [node.inputs[0]], {"to": target})]

"""Const and Convert (including the f16/u8/u4 weight-decompression chains ``ov.save_model`` writes)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ...ir import element_type
from ..context import Context, Node
from ..dtypes import numpy_type, onnx_type
from ..registry import translator


@translator("Const", 1)
def const_v1(node: Node, ctx: Context) -> list[str]:
    """A Const becomes an initializer; sub-byte integers are already unpacked to one per byte."""
    value = node.graph.constant(node.layer)
    target = numpy_type(onnx_type(element_type(node.attr("element_type")), node.where))
    return [ctx.b.const(np.asarray(value).astype(target, copy=False), hint=node.layer.name)]


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

"""Const, including the f16/u8/u4 weight-decompression chains ``ov.save_model`` writes (folded)."""

from __future__ import annotations

import numpy as np

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

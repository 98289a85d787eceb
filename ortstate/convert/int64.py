"""Shapes, axes and indices as ONNX takes them: int64 (OpenVINO takes any integer type, and often a
scalar where ONNX wants a 1-D tensor).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .context import Context, Node

__all__ = ["i64", "int64_input", "int64_vector", "scalar_const"]


def i64(ctx: Context, value: object) -> str:
    """An int64 constant holding ``value``."""
    return ctx.b.const(np.array(value, np.int64))


def int64_input(node: Node, ctx: Context, i: int) -> str:
    """Input ``i`` as int64 (ONNX wants int64 shapes, axes and indices; OpenVINO takes any integer type)."""
    if node.input_type(i).name == "i64":
        return node.inputs[i]
    value = node.const(i)
    if value is not None:
        return ctx.b.const(np.asarray(value).astype(np.int64))
    return ctx.b.op("Cast", [node.inputs[i]], {"to": TensorProto.INT64})


def int64_vector(node: Node, ctx: Context, i: int) -> str:
    """Input ``i`` as a 1-D int64 tensor (OpenVINO often allows a scalar where ONNX wants ``[n]``)."""
    value = node.const(i)
    if value is not None:
        return ctx.b.const(np.asarray(value).astype(np.int64).reshape(-1))
    return ctx.b.op("Reshape", [int64_input(node, ctx, i), ctx.b.const(np.array([-1], np.int64))])


def scalar_const(node: Node, i: int, what: str) -> int:
    """Input ``i`` as one constant integer (an axis OpenVINO passes as an input but ONNX as an attribute)."""
    values = node.const_ints(i, what)
    if len(values) != 1:
        raise node.error(f"input {i} ({what}) expected one value, got {len(values)}")
    return values[0]

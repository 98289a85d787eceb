"""ScaledDotProductAttention-13, composed from MatMul, Softmax and masking ops of ONNX opset 21.

OpenVINO layout (spec ``scaled-dot-product-attention-13``)::

    query [N, ..., L, E]   key [N, ..., S, E]   value [N, ..., S, Ev]   -> [N, ..., L, Ev]
    attention_mask [N, ..., L or 1, S] (boolean, or T added to the scores), or a scalar 0 (= no mask)
    scale: scalar T, default 1 / sqrt(E)
    sink [N, ..., L or 1, 1] (T): one extra logit per row that joins the softmax and is then dropped
    causal: a top-left aligned mask (numpy.triu(-inf, k=1) over [L, S]); the mask input is then ignored

    scores = MatMul(query, Transpose(key, [-2, -1])) * scale  (+ mask or causal bias)
    return MatMul(Softmax(scores, axis=-1), value)

The batch dims ``N, ...`` broadcast numpy-style (the OpenVINO 2026 CPU plugin rejects the "repeat"
broadcasting of the spec's third example, e.g. 2 key heads for 4 query heads), which is what ONNX MatMul
does too. A boolean mask keeps the scores where it is true and sets -inf elsewhere, so a row masked out
entirely gives NaN, as in OpenVINO.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ..context import Context, Node
from ..dtypes import numpy_type
from ..registry import translator

_QUERY, _KEY, _VALUE, _MASK, _SCALE, _SINK = range(6)


def _dim(ctx: Context, value: str, axis: int) -> str:
    """Dim ``axis`` (negative) of ``value`` as an int64 scalar."""
    attrs = {"start": axis} if axis == -1 else {"start": axis, "end": axis + 1}
    return ctx.b.op("Squeeze", [ctx.b.op("Shape", [value], attrs)])


def _scale(node: Node, ctx: Context, etype: int) -> str:
    """The scale input, or 1 / sqrt(E) computed in the query's type."""
    if len(node.inputs) > _SCALE:
        return node.inputs[_SCALE]
    dtype = numpy_type(etype)
    dims = node.input_shape(_QUERY).dims
    if dims and dims[-1].is_static:
        return ctx.b.const(np.asarray(1, dtype) / np.sqrt(np.asarray(dims[-1].lo, dtype)))
    size = ctx.b.op("Cast", [_dim(ctx, node.inputs[_QUERY], -1)], {"to": etype})
    return ctx.b.op("Reciprocal", [ctx.b.op("Sqrt", [size])])


def _is_zero_scalar(node: Node) -> bool:
    """A constant scalar 0 mask: the spec's way of saying "no mask"."""
    value = node.const(_MASK)
    return value is not None and np.asarray(value).ndim == 0 and not np.asarray(value).any()


def _masked(node: Node, ctx: Context, scores: str, etype: int) -> str:
    """``scores`` with the causal or the given mask applied."""
    b = ctx.b
    minus_inf = b.const(np.asarray(-np.inf, numpy_type(etype)))
    if node.attr_bool("causal"):
        zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
        rows = b.op("Range", [zero, _dim(ctx, node.inputs[_QUERY], -2), one])
        cols = b.op("Range", [zero, _dim(ctx, node.inputs[_KEY], -2), one])
        future = b.op("Greater", [cols, b.op("Unsqueeze", [rows, b.const(np.array([1], np.int64))])])
        return b.op("Where", [future, minus_inf, scores])
    if len(node.inputs) <= _MASK or _is_zero_scalar(node):
        return scores
    mask = node.inputs[_MASK]
    if node.onnx_input_type(_MASK) == T.BOOL:
        return b.op("Where", [mask, scores, minus_inf])
    if node.onnx_input_type(_MASK) != etype:
        raise node.error(f"attention_mask expected boolean or the query's type, got {node.input_type(_MASK).name}")
    return b.op("Add", [scores, mask])


def _softmax(node: Node, ctx: Context, scores: str) -> str:
    """Softmax over the last axis, with the sink logit (input 5) joining it when present."""
    b = ctx.b
    if len(node.inputs) <= _SINK:
        return b.op("Softmax", [scores], {"axis": -1})
    rows = b.op("Concat", [b.op("Shape", [scores], {"end": -1}), b.const(np.array([1], np.int64))], {"axis": 0})
    sink = b.op("Expand", [node.inputs[_SINK], rows])
    weights = b.op("Softmax", [b.op("Concat", [scores, sink], {"axis": -1})], {"axis": -1})
    axis, start, end = (b.const(np.array([v], np.int64)) for v in (-1, 0, -1))
    return b.op("Slice", [weights, start, end, axis])


@translator("ScaledDotProductAttention", 13)
def scaled_dot_product_attention_v13(node: Node, ctx: Context) -> list[str]:
    """ScaledDotProductAttention-13 -> Transpose(key) + MatMul + Mul(scale) + Where/Add(mask) + Softmax + MatMul.

    Inputs: query, key, value, optional attention_mask, scale and sink (see the module docstring);
    attribute ``causal``. The causal mask is built at run time from L and S (Range + Greater).
    """
    if len(node.inputs) < 3:
        raise node.error(f"expected at least 3 inputs (query, key, value), got {len(node.inputs)}")
    etype = node.onnx_input_type(_QUERY)
    if etype not in (T.FLOAT, T.FLOAT16, T.DOUBLE):
        raise node.error(f"query expected a floating-point type, got {node.input_type(_QUERY).name}")
    rank = node.input_rank(_KEY)
    if rank < 2:
        raise node.error(f"key expected rank >= 2, got {rank}")
    b = ctx.b
    key_t = b.op("Transpose", [node.inputs[_KEY]], {"perm": [*range(rank - 2), rank - 1, rank - 2]})
    scores = b.op("Mul", [b.op("MatMul", [node.inputs[_QUERY], key_t]), _scale(node, ctx, etype)])
    weights = _softmax(node, ctx, _masked(node, ctx, scores, etype))
    return [b.op("MatMul", [weights, node.inputs[_VALUE]])]

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

A decoder's self-attention over a KV variable (see :mod:`..kv_attention`) runs on ONNX Runtime's
fused ``com.microsoft.GroupQueryAttention`` instead: K/V stay at the cache's heads (no repeat),
the kernel appends this step's rows to the past itself, and its ``present`` outputs become what
the variables store. It runs with ``causal=0`` and the model's own mask as ``attention_bias``
(``-inf`` where a boolean mask is false), so it computes exactly what the composition does,
whatever the mask says (padding, sliding windows, causal or not); a sink of one constant logit per
head is its ``head_sink`` (ONNX Runtime's softmax over the scores and the sink, as OpenVINO's).
The kernel refuses more than one new row with a past for batches above 1; that case takes the
composition, in the then-branch of an ``If``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ..builder import GraphBuilder
from ..compressed import MS_DOMAIN
from ..context import Context, Node
from ..dtypes import numpy_type
from ..kv_attention import KvAttention, KvSide, match
from ..registry import translator

_QUERY, _KEY, _VALUE, _MASK, _SCALE, _SINK = range(6)


def _dim(b: GraphBuilder, value: str, axis: int) -> str:
    """Dim ``axis`` (negative or not) of ``value`` as an int64 scalar."""
    attrs = {"start": axis} if axis == -1 else {"start": axis, "end": axis + 1}
    return b.op("Squeeze", [b.op("Shape", [value], attrs)])


def _scale(node: Node, b: GraphBuilder, etype: int) -> str:
    """The scale input, or 1 / sqrt(E) computed in the query's type."""
    if len(node.inputs) > _SCALE:
        return node.inputs[_SCALE]
    dtype = numpy_type(etype)
    dims = node.input_shape(_QUERY).dims
    if dims and dims[-1].is_static:
        return b.const(np.asarray(1, dtype) / np.sqrt(np.asarray(dims[-1].lo, dtype)))
    size = b.op("Cast", [_dim(b, node.inputs[_QUERY], -1)], {"to": etype})
    return b.op("Reciprocal", [b.op("Sqrt", [size])])


def _is_zero_scalar(node: Node) -> bool:
    """A constant scalar 0 mask: the spec's way of saying "no mask"."""
    value = node.const(_MASK)
    return value is not None and np.asarray(value).ndim == 0 and not np.asarray(value).any()


def _has_mask(node: Node) -> bool:
    return len(node.inputs) > _MASK and not _is_zero_scalar(node)


def _masked(node: Node, b: GraphBuilder, scores: str, key: str, etype: int) -> str:
    """``scores`` with the causal or the given mask applied."""
    minus_inf = b.const(np.asarray(-np.inf, numpy_type(etype)))
    if node.attr_bool("causal"):
        zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
        rows = b.op("Range", [zero, _dim(b, node.inputs[_QUERY], -2), one])
        cols = b.op("Range", [zero, _dim(b, key, -2), one])
        future = b.op("Greater", [cols, b.op("Unsqueeze", [rows, b.const(np.array([1], np.int64))])])
        return b.op("Where", [future, minus_inf, scores])
    if not _has_mask(node):
        return scores
    mask = node.inputs[_MASK]
    if node.onnx_input_type(_MASK) == T.BOOL:
        return b.op("Where", [mask, scores, minus_inf])
    if node.onnx_input_type(_MASK) != etype:
        raise node.error(f"attention_mask expected boolean or the query's type, got {node.input_type(_MASK).name}")
    return b.op("Add", [scores, mask])


def _softmax(node: Node, b: GraphBuilder, scores: str) -> str:
    """Softmax over the last axis, with the sink logit (input 5) joining it when present."""
    if len(node.inputs) <= _SINK:
        return b.op("Softmax", [scores], {"axis": -1})
    rows = b.op("Concat", [b.op("Shape", [scores], {"end": -1}), b.const(np.array([1], np.int64))], {"axis": 0})
    sink = b.op("Expand", [node.inputs[_SINK], rows])
    weights = b.op("Softmax", [b.op("Concat", [scores, sink], {"axis": -1})], {"axis": -1})
    axis, start, end = (b.const(np.array([v], np.int64)) for v in (-1, 0, -1))
    return b.op("Slice", [weights, start, end, axis])


def _composed(node: Node, b: GraphBuilder, key: str, value: str, etype: int, rank: int) -> str:
    """Transpose(key) + MatMul + Mul(scale) + mask + Softmax + MatMul."""
    key_t = b.op("Transpose", [key], {"perm": [*range(rank - 2), rank - 1, rank - 2]})
    scores = b.op("Mul", [b.op("MatMul", [node.inputs[_QUERY], key_t]), _scale(node, b, etype)])
    weights = _softmax(node, b, _masked(node, b, scores, key, etype))
    return b.op("MatMul", [weights, value])


def _to_bsd(b: GraphBuilder, x: str) -> str:
    """[batch, heads, seq, size] -> [batch, seq, heads * size] (the kernel's layout)."""
    flat = b.const(np.array([0, 0, -1], np.int64))
    return b.op("Reshape", [b.op("Transpose", [x], {"perm": [0, 2, 1, 3]}), flat])


def _repeat(b: GraphBuilder, x: str, kv: KvAttention) -> str:
    """[batch, kv_heads, seq, size] -> [batch, heads, seq, size], each KV head repeated in turn."""
    groups = kv.heads // kv.kv_heads
    if groups == 1:
        return x
    lead, tail = b.op("Shape", [x], {"end": 2}), b.op("Shape", [x], {"start": 2})
    five = b.op("Concat", [lead, b.const(np.array([groups], np.int64)), tail], {"axis": 0})
    expanded = b.op("Expand", [b.op("Unsqueeze", [x, b.const(np.array([2], np.int64))]), five])
    return b.op("Reshape", [expanded, b.const(np.array([0, kv.heads, -1, kv.head_size], np.int64))])


def _bias(node: Node, b: GraphBuilder, seq: str, total: str) -> str:
    """The mask as the kernel's attention_bias: 4-D [batch or 1, heads or 1, seq, total], f32."""
    mask = node.inputs[_MASK]
    if node.onnx_input_type(_MASK) == T.BOOL:
        zero, minus_inf = b.const(np.array(0, np.float32)), b.const(np.array(-np.inf, np.float32))
        mask = b.op("Where", [mask, zero, minus_inf])
    rank = node.input_rank(_MASK)
    if rank < 4:
        mask = b.op("Unsqueeze", [mask, b.const(np.arange(4 - rank, dtype=np.int64))])
    ones = b.const(np.array([1, 1], np.int64))
    unsq = b.const(np.array([0], np.int64))
    rows = b.op("Concat", [ones, b.op("Unsqueeze", [seq, unsq]), b.op("Unsqueeze", [total, unsq])], {"axis": 0})
    return b.op("Expand", [mask, rows])


def _fused(node: Node, ctx: Context, kv: KvAttention) -> str:
    """GroupQueryAttention over the variable's past rows; the Concats' values become its presents."""
    b = ctx.b
    assert ctx.value_of is not None
    # The past rows as the variable holds them: a beam reorder in front of them is the runtime's
    # (recorded with the variable), done only on runs whose beam_idx is not the identity.
    past_k, past_v = (_past(ctx, side) for side in (kv.key, kv.value))
    new_k, new_v = ctx.value_of(kv.key.concat, 1), ctx.value_of(kv.value.concat, 1)
    i64 = b.const(np.array([0], np.int64))
    batch, seq, past = _dim(b, node.inputs[_QUERY], 0), _dim(b, node.inputs[_QUERY], 2), _dim(b, past_k, 2)
    total = b.op("Add", [past, seq])
    inputs = [_to_bsd(b, node.inputs[_QUERY]), _to_bsd(b, new_k), _to_bsd(b, new_v), past_k, past_v]
    total32 = b.op("Cast", [total], {"to": T.INT32})
    seqlens = b.op("Expand", [b.op("Sub", [total32, b.const(np.array(1, np.int32))]), b.op("Unsqueeze", [batch, i64])])
    inputs += [seqlens, total32]
    if _has_mask(node) or kv.sink is not None:
        inputs += ["", "", "", _bias(node, b, seq, total) if _has_mask(node) else ""]
    if kv.sink is not None:
        inputs.append(b.const(kv.sink))
    attrs = {"num_heads": kv.heads, "kv_num_heads": kv.kv_heads, "scale": kv.scale, "causal": 0}
    one = b.const(np.array(1, np.int64))
    several = b.op("And", [b.op("Greater", [batch, one]), b.op("Greater", [seq, one])])
    composed_case = b.op("And", [several, b.op("Greater", [past, b.const(np.array(0, np.int64))])])

    then_b = b.sub(f"{node.layer.name}/composed")
    key = then_b.op("Concat", [past_k, new_k], {"axis": 2})
    value = then_b.op("Concat", [past_v, new_v], {"axis": 2})
    out = _composed(node, then_b, _repeat(then_b, key, kv), _repeat(then_b, value, kv), T.FLOAT, 4)
    for name in (out, key, value):
        then_b.add_output(name, T.FLOAT, None)

    else_b = b.sub(f"{node.layer.name}/fused")
    out3, present_k, present_v = else_b.op("GroupQueryAttention", inputs, attrs, outputs=3, domain=MS_DOMAIN)
    heads = else_b.const(np.array([0, 0, kv.heads, kv.head_size], np.int64))
    out4 = else_b.op("Transpose", [else_b.op("Reshape", [out3, heads])], {"perm": [0, 2, 1, 3]})
    for name in (out4, present_k, present_v):
        else_b.add_output(name, T.FLOAT, None)
    b.domains.add(MS_DOMAIN)

    out, present_k, present_v = b.op(
        "If", [composed_case], {"then_branch": then_b.graph(), "else_branch": else_b.graph()}, outputs=3
    )
    for side, present, past_x, new_x in ((kv.key, present_k, past_k, new_k), (kv.value, present_v, past_v, new_v)):
        reader, index = ctx.graph.consumers(side.concat, 0)[0]
        ctx.aliases[ctx.value_of(reader, index)] = present
        if side.past_shapes:  # the runtime has reordered the rows before the run
            _alias_shapes(ctx, side.past_shapes, b.op("Shape", [past_x]))
        if side.shapes:
            # The Concat's shape from its inputs' (reading the present's would make a cycle where the
            # mask the kernel takes is built from it).
            seq_only = b.const(np.array([0, 0, 1, 0], np.int64))
            shape = b.op("Add", [b.op("Shape", [past_x]), b.op("Mul", [b.op("Shape", [new_x]), seq_only])])
            _alias_shapes(ctx, side.shapes, shape)
    return out


def _past(ctx: Context, side: KvSide) -> str:
    """The variable's value the past rows come from; its reorder, if any, recorded for the runtime."""
    assert ctx.value_of is not None
    reader = ctx.graph.consumers(side.read, 0)
    if side.reorder is not None:
        ctx.reorders[side.read.attrs.get("variable_id", "")] = side.reorder
    return ctx.value_of(*reader[0])


def _alias_shapes(ctx: Context, layers: tuple, shape: str) -> None:
    """Every ShapeOf of ``layers`` reads as ``shape`` (int64), cast to its own output type."""
    assert ctx.value_of is not None
    for layer in layers:
        readers = ctx.graph.consumers(layer, 0)
        if not readers:
            continue
        etype = layer.outputs[0].element_type
        value = shape if etype is None or etype.name == "i64" else ctx.b.op("Cast", [shape], {"to": T.INT32})
        ctx.aliases[ctx.value_of(*readers[0])] = value


@translator("ScaledDotProductAttention", 13)
def scaled_dot_product_attention_v13(node: Node, ctx: Context) -> list[str]:
    """ScaledDotProductAttention-13 -> GroupQueryAttention over a KV variable (see the module
    docstring), else Transpose(key) + MatMul + Mul(scale) + Where/Add(mask) + Softmax + MatMul.

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
    if len(node.inputs) > _MASK and not _is_zero_scalar(node) and node.onnx_input_type(_MASK) not in (T.BOOL, etype):
        raise node.error(f"attention_mask expected boolean or the query's type, got {node.input_type(_MASK).name}")
    kv = match(ctx.graph, node.layer) if ctx.value_of is not None else "inside a loop body"
    if isinstance(kv, KvAttention):
        ctx.record_attention(node.layer, "GroupQueryAttention", f"{kv.heads} heads, {kv.kv_heads} KV heads")
        return [_fused(node, ctx, kv)]
    ctx.record_attention(node.layer, "composed", kv)
    return [_composed(node, ctx.b, node.inputs[_KEY], node.inputs[_VALUE], etype, rank)]

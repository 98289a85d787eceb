"""A crafted decoder attention layer over a KV cache, as optimum-intel writes one: the cache in two
variables initialised to zeros of ``[batch, kv_heads, 0, size]``, reordered by ``beam_idx``,
appended to, repeated from ``kv_heads`` to ``heads`` (repeat_kv) and fed to
ScaledDotProductAttention-13 with a mask built from ``attention_mask``. Shared by the converter's
attention tests and the runtime's KV-buffer tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino import opset6
from oracle import save_ir, variable

HIDDEN = 8


@dataclass(frozen=True)
class Spec:
    heads: int = 4
    kv_heads: int = 2
    size: int = 8
    mask: str = "bool"  # bool | float | none | window (boolean, causal within 3 positions)
    scale: float | None = None
    causal: bool = False
    sink: str = "none"  # none | heads (a constant logit per head, gpt-oss's) | computed (from x)


def _i64(values: list[int]) -> ov.Node:
    return ops.constant(np.array(values, np.int64))


def attention(
    x: ov.Node, mask_in: ov.Node, beam_idx: ov.Node, spec: Spec, prefix: str = "", batch_of: ov.Node | None = None
) -> tuple[ov.Node, list]:
    """One attention over ``x [batch, seq, HIDDEN]`` with its KV cache in variables ``{prefix}key`` and
    ``{prefix}value``, empty at first (its batch that of ``batch_of``, default ``x``): ``[batch, seq,
    heads * size]`` and the variables' Assigns."""
    rng = np.random.default_rng(11 + len(prefix))
    batch = ops.gather(ops.shape_of(x if batch_of is None else batch_of), _i64([0]), ops.constant(np.int64(0)))
    init_shape = ops.concat([batch, _i64([spec.kv_heads, 0, spec.size])], 0)

    def heads(width: int, n: int) -> ov.Node:
        w = ops.constant(rng.standard_normal((HIDDEN, width)).astype(np.float32) * 0.5)
        return ops.transpose(ops.reshape(ops.matmul(x, w, False, False), [0, -1, n, spec.size], True), [0, 2, 1, 3])

    query = heads(spec.heads * spec.size, spec.heads)
    caches, assigns = [], []
    for name in ("key", "value"):
        var = variable(prefix + name, [-1, spec.kv_heads, -1, spec.size])
        read = opset6.read_value(ops.broadcast(ops.constant(np.array(0, np.float32)), init_shape), var)
        past = ops.gather(read, beam_idx, ops.constant(np.int64(0)))
        cache = ops.concat([past, heads(spec.kv_heads * spec.size, spec.kv_heads)], 2)
        assigns.append(opset6.assign(cache, var))
        groups = spec.heads // spec.kv_heads
        if groups > 1:
            dims = ops.shape_of(cache)
            lead = ops.gather(dims, _i64([0, 1]), ops.constant(np.int64(0)))
            tail = ops.gather(dims, _i64([2, 3]), ops.constant(np.int64(0)))
            repeated = ops.broadcast(
                ops.unsqueeze(cache, _i64([2])), ops.concat([lead, _i64([groups]), tail], 0), "bidirectional"
            )
            cache = ops.reshape(repeated, _i64([0, spec.heads, -1, spec.size]), True)
        caches.append(cache)
    # [batch, 1, seq, total]: attend where attention_mask is 1 and the key is not in the future
    zero, one = ops.constant(np.int64(0)), ops.constant(np.int64(1))
    total = ops.gather(ops.shape_of(mask_in), one, zero)
    seq = ops.gather(ops.shape_of(x), one, zero)
    keys = ops.range(zero, total, one, "i64")
    rows = ops.add(ops.range(zero, seq, one, "i64"), ops.subtract(total, seq))
    allowed = ops.less_equal(ops.unsqueeze(keys, _i64([0])), ops.unsqueeze(rows, _i64([1])))
    if spec.mask == "window":
        recent = ops.greater(ops.unsqueeze(keys, _i64([0])), ops.subtract(ops.unsqueeze(rows, _i64([1])), _i64([3])))
        allowed = ops.logical_and(allowed, recent)
    padding = ops.unsqueeze(ops.convert(mask_in, np.bool_), _i64([1, 2]))
    mask = ops.logical_and(ops.unsqueeze(allowed, _i64([0, 1])), padding)
    inputs = [query, *caches]
    if spec.mask == "float":
        inputs.append(ops.select(mask, ops.constant(np.float32(0)), ops.constant(np.float32(-1e9))))
    elif spec.mask in ("bool", "window"):
        inputs.append(mask)
    if spec.scale is not None:
        if spec.mask == "none":
            inputs.append(ops.constant(np.float32(0)))
        inputs.append(ops.constant(np.float32(spec.scale)))
    attn = ops.scaled_dot_product_attention(*inputs, causal=spec.causal)
    if spec.sink != "none":  # the Python API takes no sink: the layer is given its sixth input
        while len(inputs) < 5:  # no mask (a scalar 0), the default scale
            default = 0.0 if len(inputs) == 3 else 1 / spec.size**0.5
            inputs.append(ops.constant(np.float32(default)))
        sink = ops.constant(rng.standard_normal((1, spec.heads, 1, 1)).astype(np.float32) * 2)
        if spec.sink == "computed":  # one logit per batch row, from the input
            sink = ops.unsqueeze(ops.reduce_mean(x, _i64([1, 2]), False), _i64([1, 2, 3]))
        attn.set_arguments([node.output(0) for node in [*inputs, sink]])
        attn.validate_and_infer_types()
    return ops.reshape(ops.transpose(attn, [0, 2, 1, 3]), [0, 0, -1], True), assigns


def decoder_layer(spec: Spec) -> ov.Model:
    """``x [batch, seq, HIDDEN]``, ``attention_mask [batch, past + seq]`` (1 = attend), ``beam_idx``
    -> ``out [batch, seq, heads * size]``; variables ``key`` and ``value``."""
    x = ops.parameter([-1, -1, HIDDEN], np.float32, name="x")
    mask_in = ops.parameter([-1, -1], np.int64, name="attention_mask")
    beam_idx = ops.parameter([-1], np.int32, name="beam_idx")
    out, assigns = attention(x, mask_in, beam_idx, spec)
    result = ops.result(out)
    result.output(0).get_tensor().set_names({"out"})
    return ov.Model([result], assigns, [x, mask_in, beam_idx], "attention_layer")


def token_decoder(specs: list[Spec], vocab: int = 32) -> ov.Model:
    """A decoder of token ids with one attention per spec (each over its own cache, variables
    ``layer{k}.key``/``.value``) and a residual between them, as optimum-intel feeds one:
    ``input_ids``, ``attention_mask``, ``beam_idx`` -> ``logits [batch, seq, vocab]``."""
    rng = np.random.default_rng(23)
    ids = ops.parameter([-1, -1], np.int64, name="input_ids")
    mask_in = ops.parameter([-1, -1], np.int64, name="attention_mask")
    beam_idx = ops.parameter([-1], np.int32, name="beam_idx")
    table = ops.constant(rng.standard_normal((vocab, HIDDEN)).astype(np.float32))
    x = ops.gather(table, ids, ops.constant(np.int64(0)))
    assigns = []
    for k, spec in enumerate(specs):
        out, made = attention(x, mask_in, beam_idx, spec, f"layer{k}.", ids)
        w = ops.constant(rng.standard_normal((spec.heads * spec.size, HIDDEN)).astype(np.float32) * 0.3)
        x = ops.add(x, ops.matmul(out, w, False, False))
        assigns += made
    head = ops.constant(rng.standard_normal((HIDDEN, vocab)).astype(np.float32))
    result = ops.result(ops.matmul(x, head, False, False))
    result.output(0).get_tensor().set_names({"logits"})
    return ov.Model([result], assigns, [ids, mask_in, beam_idx], "token_decoder")


def save_layer(tmp_path, spec: Spec):
    return save_ir(decoder_layer(spec), tmp_path, "attention")

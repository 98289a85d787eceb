"""Stateful OpenVINO IRs for the sweeps, built with OpenVINO's opset API (no torch needed).

- :func:`lstm_ir`: what ``torch nn.LSTM(input, hidden, layers, batch_first=True)`` becomes after
  ``ov.convert_model`` + ``MakeStateful`` (see ``models/make_recurrent_models.py``): one
  LSTMSequence-5 per layer, and two variables ``h``/``c`` of shape ``[layers, batch, hidden]`` split
  per layer, read by ReadValue-6 without input (zeros) and written back by Assign-6.
- :func:`variables_ir`: ``n`` small independent variables (``s_i = 0.5 * s_i + x``), to see the
  per-variable cost of state management apart from compute.
- :func:`kv_decoder_ir`: a llama-sized decoder (hidden 64, 2 layers, 2 heads of 16, vocab 256)
  with its KV caches in variables as optimum-intel writes them (init ``Broadcast(0, [B, 2, 0, 16])``
  computed from ``input_ids``, read through ``Gather(past, beam_idx)``, ``Assign(Concat(past, new))``)
  but attention written as MatMul/Softmax instead of ScaledDotProductAttention, and a learned
  position table of 4096 rows so decode positions up to 2048 are in range.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset5 as op5
import openvino.opset13 as ops
from openvino import opset6
from openvino.op.util import Variable, VariableInfo

__all__ = ["kv_decoder_ir", "lstm_ir", "variables_ir"]

KV_HEADS = 2
HEAD_DIM = 16
KV_POSITIONS = 4096


def _variable(var_id: str, shape: list[int], etype: ov.Type = ov.Type.f32) -> Variable:
    info = VariableInfo()
    info.data_shape = ov.PartialShape(shape)
    info.data_type = etype
    info.variable_id = var_id
    return Variable(info)


def _i64(*values: int) -> ov.Node:
    return ops.constant(np.array(values, np.int64))


def _weight(rng: np.random.Generator, *shape: int) -> ov.Node:
    scale = 1.0 / np.sqrt(shape[-1])
    return ops.constant((rng.standard_normal(shape) * scale).astype(np.float32))


def _named(node: ov.Node, name: str) -> ov.Node:
    result = ops.result(node)
    result.output(0).get_tensor().set_names({name})
    node.output(0).get_tensor().set_names({name})
    return result


def _save(model: ov.Model, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def lstm_ir(path: Path, hidden: int, layers: int = 1, batch: int = 1, input_size: int = 64, seed: int = 0) -> Path:
    """A MakeStateful-style stacked LSTM step model: input ``x`` f32 ``[batch, 1, input_size]``,
    output ``y`` f32 ``[batch, 1, hidden]``, variables ``h``/``c`` ``[layers, batch, hidden]``."""
    rng = np.random.default_rng(seed)
    x = ops.parameter([batch, 1, input_size], np.float32, name="x")
    var_h, var_c = _variable("h", [layers, batch, hidden]), _variable("c", [layers, batch, hidden])
    read_h, read_c = opset6.read_value(var_h), opset6.read_value(var_c)
    hs, cs = ops.split(read_h, ops.constant(np.int64(0)), layers), ops.split(read_c, ops.constant(np.int64(0)), layers)
    seq_len = ops.constant(np.ones([batch], np.int32))
    to_ov, to_torch = _i64(1, 0, 2), _i64(1, 0, 2)  # [1, B, H] <-> [B, 1, H]
    out, new_h, new_c = x, [], []
    for layer in range(layers):
        width = input_size if layer == 0 else hidden
        cell = op5.lstm_sequence(
            out,
            ops.transpose(hs.output(layer), to_ov),
            ops.transpose(cs.output(layer), to_ov),
            seq_len,
            _weight(rng, 1, 4 * hidden, width),
            _weight(rng, 1, 4 * hidden, hidden),
            _weight(rng, 1, 4 * hidden),
            hidden,
            "forward",
        )
        out = ops.squeeze(cell.output(0), _i64(1))  # [B, 1(dir), 1(seq), H] -> [B, 1, H]
        new_h.append(ops.transpose(cell.output(1), to_torch))
        new_c.append(ops.transpose(cell.output(2), to_torch))
    h_out = ops.concat(new_h, 0) if layers > 1 else new_h[0]
    c_out = ops.concat(new_c, 0) if layers > 1 else new_c[0]
    sinks = [opset6.assign(h_out, var_h), opset6.assign(c_out, var_c)]
    model = ov.Model([_named(out, "y")], sinks, [x], f"lstm_h{hidden}_l{layers}_b{batch}")
    return _save(model, path)


def variables_ir(path: Path, count: int, size: int = 16) -> Path:
    """``count`` variables ``s_i`` f32 ``[1, size]``: ``s_i = 0.5 * s_i + x``; output ``total = sum_i s_i``."""
    x = ops.parameter([1, size], np.float32, name="x")
    half = ops.constant(np.float32(0.5))
    total, sinks = None, []
    for i in range(count):
        var = _variable(f"s{i}", [1, size])
        new = ops.add(ops.multiply(opset6.read_value(var), half), x)
        sinks.append(opset6.assign(new, var))
        total = new if total is None else ops.add(total, new)
    model = ov.Model([_named(total, "total")], sinks, [x], f"variables_{count}")
    return _save(model, path)


def _heads(x: ov.Node, heads: int) -> ov.Node:
    """``[B, S, heads * HEAD_DIM]`` -> ``[B, heads, S, HEAD_DIM]``."""
    split = ops.reshape(x, _i64(0, 0, heads, HEAD_DIM), special_zero=True)
    return ops.transpose(split, _i64(0, 2, 1, 3))


def kv_decoder_ir(path: Path, hidden: int = 64, layers: int = 2, vocab: int = 256, seed: int = 0) -> Path:
    """A decoder with optimum-intel's inputs (``input_ids``, ``attention_mask``, ``position_ids``,
    ``beam_idx``), output ``logits`` ``[B, S, vocab]`` and KV caches ``[B, 2, past, 16]`` per layer."""
    rng = np.random.default_rng(seed)
    ids = ops.parameter([-1, -1], np.int64, name="input_ids")
    mask = ops.parameter([-1, -1], np.int64, name="attention_mask")
    pos = ops.parameter([-1, -1], np.int64, name="position_ids")
    beam = ops.parameter([-1], np.int32, name="beam_idx")
    axis0 = ops.constant(np.int64(0))
    tokens = ops.gather(_weight(rng, vocab, hidden), ids, axis0)
    h = ops.add(tokens, ops.gather(_weight(rng, KV_POSITIONS, hidden), pos, axis0))
    dims = ops.shape_of(ids)
    # seq * 0, not a literal 0: see models/make_core_models.py (the CPU plugin and a static empty init)
    empty = ops.multiply(ops.gather(dims, _i64(1), axis0), _i64(0))
    init_shape = ops.concat([ops.gather(dims, _i64(0), axis0), _i64(KV_HEADS), empty, _i64(HEAD_DIM)], 0)
    zero_init = ops.broadcast(ops.constant(np.float32(0)), init_shape)
    # padding mask [B, 1, 1, L]: 0 where attended, -1e9 where masked
    keep = ops.convert(ops.unsqueeze(mask, _i64(1, 2)), "f32")
    bias = ops.multiply(ops.subtract(ops.constant(np.float32(1)), keep), ops.constant(np.float32(-1e9)))
    width, sinks = KV_HEADS * HEAD_DIM, []
    for layer in range(layers):
        q, k, v = (_heads(ops.matmul(h, _weight(rng, width, hidden), False, True), KV_HEADS) for _ in range(3))
        caches = []
        for kind, new in (("key", k), ("value", v)):
            var = _variable(f"past_key_values.{layer}.{kind}present.{layer}.{kind}", [-1, KV_HEADS, -1, HEAD_DIM])
            past = ops.gather(opset6.read_value(zero_init, var), beam, axis0)
            cache = ops.concat([past, new], 2)
            sinks.append(opset6.assign(cache, var))
            caches.append(cache)
        scores = ops.matmul(q, caches[0], False, True)
        scores = ops.add(ops.multiply(scores, ops.constant(np.float32(HEAD_DIM**-0.5))), bias)
        attn = ops.matmul(ops.softmax(scores, 3), caches[1], False, False)
        merged = ops.reshape(ops.transpose(attn, _i64(0, 2, 1, 3)), _i64(0, 0, width), special_zero=True)
        h = ops.add(h, ops.matmul(merged, _weight(rng, hidden, width), False, True))
        up = ops.matmul(h, _weight(rng, 2 * hidden, hidden), False, True)
        h = ops.add(h, ops.matmul(ops.swish(up), _weight(rng, hidden, 2 * hidden), False, True))
    logits = ops.matmul(h, _weight(rng, vocab, hidden), False, True)
    model = ov.Model([_named(logits, "logits")], sinks, [ids, mask, pos, beam], "kv_decoder")
    return _save(model, path)

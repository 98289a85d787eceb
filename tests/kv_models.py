"""A crafted one-layer KV-cache IR, as optimum-intel writes a layer's cache: shared by the
kv_layout pass tests and the export tests."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino import opset6
from oracle import save_ir, variable

RNG = np.random.default_rng(5)
HEADS, DIM, HIDDEN = 2, 4, 8
W = {kind: RNG.standard_normal((HIDDEN, HEADS * DIM)).astype(np.float32) for kind in ("key", "value")}


def one_layer(
    tmp_path,
    ids: tuple[str, str] = ("past_key_values.0.keypresent.0.key", "past_key_values.0.valuepresent.0.value"),
    *,
    token_ids: bool = False,
    init_length: int = 0,
    scaled_past: bool = False,
    batch_from_ids: bool = False,
):
    """One attention-free layer with a key and a value cache; ``token_ids``: fed ``input_ids``
    through an embedding table instead of ``x``; ``init_length``: the caches start that long;
    ``scaled_past``: the reordered cache is doubled (not a reorder alone any more);
    ``batch_from_ids``: the caches' initial batch read from ``input_ids`` (optimum-intel's way: no
    init flag in the explicit form) instead of from the embedded ``x``."""
    if token_ids:
        ids_input = ops.parameter([-1, -1], np.int64, name="input_ids")
        table = RNG.standard_normal((16, HIDDEN)).astype(np.float32)
        x = ops.gather(ops.constant(table), ids_input, ops.constant(np.int64(0)))
        params = [ids_input]
    else:
        x = ops.parameter([-1, -1, HIDDEN], np.float32, name="x")
        params = [x]
    beam_idx = ops.parameter([-1], np.int32, name="beam_idx")
    first = ops.constant(np.array([0], np.int64))
    batch = ops.gather(ops.shape_of(params[0] if batch_from_ids else x), first, ops.constant(np.int64(0)))
    shape = ops.concat([batch, ops.constant(np.array([HEADS, init_length, DIM], np.int64))], 0)
    results, assigns = [], []
    for kind, vid in zip(("key", "value"), ids):
        var = variable(vid, [-1, HEADS, -1, DIM])
        read = opset6.read_value(ops.broadcast(ops.constant(np.array(0, np.float32)), shape), var)
        past = ops.gather(read, beam_idx, ops.constant(np.int64(0)))
        if scaled_past:
            past = ops.multiply(past, ops.constant(np.array(2, np.float32)))
        proj = ops.reshape(ops.matmul(x, ops.constant(W[kind]), False, False), [0, -1, HEADS, DIM], True)
        cache = ops.concat([past, ops.transpose(proj, [0, 2, 1, 3])], 2)
        assigns.append(opset6.assign(cache, var))
        results.append(ops.reduce_sum(cache, ops.constant(np.array([1, 2], np.int64)), False))
    logits = ops.add(results[0], results[1])
    logits.output(0).get_tensor().set_names({"logits"})
    model = ov.Model([ops.result(logits)], assigns, [*params, beam_idx], "layer")
    return save_ir(model, tmp_path, "layer")

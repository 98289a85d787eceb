"""An LLM-style KV cache: init from the batch size, read through Gather(beam_idx), grown by Concat."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino import opset6
from openvino.op.util import Variable, VariableInfo
from oracle import RESET, check_steps, save_ir

RNG = np.random.default_rng(11)
HEADS, DIM, HIDDEN = 2, 4, 8


def kv_model(tmp_path, compress: bool, state_type=ov.Type.f32):
    x = ops.parameter([-1, -1, HIDDEN], np.float32, name="x")
    beam_idx = ops.parameter([-1], np.int32, name="beam_idx")
    info = VariableInfo()
    info.data_shape = ov.PartialShape([-1, HEADS, -1, DIM])
    info.data_type = state_type
    info.variable_id = "past.key"
    var = Variable(info)
    batch = ops.gather(ops.shape_of(x), ops.constant(np.array([0], np.int64)), ops.constant(np.int64(0)))
    shape = ops.concat([batch, ops.constant(np.array([HEADS, 0, DIM], np.int64))], 0)
    zero = ops.constant(np.array(0, np.float32 if state_type == ov.Type.f32 else np.float16))
    read = opset6.read_value(ops.broadcast(zero, shape), var)
    past = ops.gather(read, beam_idx, ops.constant(np.int64(0)))
    w = ops.constant(RNG.standard_normal((HIDDEN, HEADS * DIM)).astype(np.float32))
    proj = ops.matmul(x, w, False, False)
    heads = ops.transpose(
        ops.reshape(proj, ops.constant(np.array([0, -1, HEADS, DIM], np.int64)), True),
        ops.constant(np.array([0, 2, 1, 3], np.int64)),
    )
    if state_type != ov.Type.f32:
        heads = ops.convert(heads, state_type)
    cache = ops.concat([past, heads], 2)
    assign = opset6.assign(cache, var)
    out = ops.multiply(cache, ops.constant(np.array(2, np.float32 if state_type == ov.Type.f32 else np.float16)))
    model = ov.Model([ops.result(out)], [assign], [x, beam_idx], "kv")
    return save_ir(model, tmp_path, "kv", compress)


def steps_for(batch: int, prefill: int, decode: int) -> list[dict[str, np.ndarray]]:
    steps = [
        {
            "x": RNG.standard_normal((batch, prefill, HIDDEN)).astype(np.float32),
            "beam_idx": np.arange(batch, dtype=np.int32),
        }
    ]
    for _ in range(decode):
        steps.append(
            {
                "x": RNG.standard_normal((batch, 1, HIDDEN)).astype(np.float32),
                "beam_idx": RNG.permutation(batch).astype(np.int32),
            }
        )
    return steps


@pytest.mark.parametrize("compress", [False, True])
def test_kv_cache_grows_reorders_and_changes_batch_after_reset(tmp_path, compress):
    xml = kv_model(tmp_path, compress)
    tol = 1e-3 if compress else 1e-5
    check_steps(xml, [*steps_for(2, 3, 3), RESET, *steps_for(3, 2, 2), RESET, *steps_for(1, 4, 1)], rtol=tol, atol=tol)


def test_f16_kv_cache(tmp_path):
    xml = kv_model(tmp_path, False, ov.Type.f16)
    check_steps(xml, [*steps_for(2, 3, 2), RESET, *steps_for(1, 2, 2)], rtol=2e-3, atol=2e-3)

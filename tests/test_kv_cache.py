"""An LLM-style KV cache: init from the batch size, read through Gather(beam_idx), grown by Concat.

Two references: numpy (exact semantics, any init spelling) and OpenVINO. OpenVINO's CPU plugin
fails on the second run of a cache initialised with a literal 0 length (``[heads, 0, dim]``) and
reads stale data after ``reset_state()``; the OpenVINO cases therefore build the 0 as ``seq * 0``
and compile afresh for each stream, while ortstate resets its one session.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino import opset6
from openvino.op.util import Variable, VariableInfo
from oracle import REWRITTEN, assert_close, open_session, ov_request, ov_run, ov_states, save_ir

RNG = np.random.default_rng(11)
HEADS, DIM, HIDDEN = 2, 4, 8
W = RNG.standard_normal((HIDDEN, HEADS * DIM)).astype(np.float32)


def kv_model(tmp_path, compress: bool = False, state_type=ov.Type.f32, zero_from_seq: bool = False):
    x = ops.parameter([-1, -1, HIDDEN], np.float32, name="x")
    beam_idx = ops.parameter([-1], np.int32, name="beam_idx")
    info = VariableInfo()
    info.data_shape = ov.PartialShape([-1, HEADS, -1, DIM])
    info.data_type = state_type
    info.variable_id = "past.key"
    var = Variable(info)
    dims = ops.shape_of(x)
    batch = ops.gather(dims, ops.constant(np.array([0], np.int64)), ops.constant(np.int64(0)))
    if zero_from_seq:
        seq = ops.gather(dims, ops.constant(np.array([1], np.int64)), ops.constant(np.int64(0)))
        empty = ops.multiply(seq, ops.constant(np.array([0], np.int64)))
        shape = ops.concat(
            [batch, ops.constant(np.array([HEADS], np.int64)), empty, ops.constant(np.array([DIM], np.int64))], 0
        )
    else:
        shape = ops.concat([batch, ops.constant(np.array([HEADS, 0, DIM], np.int64))], 0)
    np_type = np.float32 if state_type == ov.Type.f32 else np.float16
    read = opset6.read_value(ops.broadcast(ops.constant(np.array(0, np_type)), shape), var)
    past = ops.gather(read, beam_idx, ops.constant(np.int64(0)))
    proj = ops.matmul(x, ops.constant(W), False, False)
    new_shape = ops.constant(np.array([0, -1, HEADS, DIM], np.int64))
    heads = ops.transpose(ops.reshape(proj, new_shape, True), ops.constant(np.array([0, 2, 1, 3], np.int64)))
    if state_type != ov.Type.f32:
        heads = ops.convert(heads, state_type)
    cache = ops.concat([past, heads], 2)
    out = ops.multiply(cache, ops.constant(np.array(2, np_type)))
    model = ov.Model([ops.result(out)], [opset6.assign(cache, var)], [x, beam_idx], "kv")
    return save_ir(model, tmp_path, "kv", compress)


def stream(batch: int, prefill: int, decode: int) -> list[dict[str, np.ndarray]]:
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


STREAMS = [stream(2, 3, 3), stream(3, 2, 2), stream(1, 4, 1)]


def numpy_stream(steps, dtype=np.float32):
    """The cache semantics written out: yields (output, cache) per step."""
    cache = None
    for step in steps:
        x, beam = step["x"], step["beam_idx"]
        b, s, _ = x.shape
        heads = (x @ W).reshape(b, s, HEADS, DIM).transpose(0, 2, 1, 3).astype(dtype)
        past = np.zeros((b, HEADS, 0, DIM), dtype) if cache is None else cache[beam]
        cache = np.concatenate([past, heads], axis=2)
        yield cache * dtype(2), cache


@pytest.mark.parametrize("explicit", [False, True, REWRITTEN])
def test_kv_cache_against_numpy(tmp_path, explicit):
    session = open_session(kv_model(tmp_path), explicit)
    for steps in STREAMS:
        session.reset_state()
        for index, (step, (want, cache)) in enumerate(zip(steps, numpy_stream(steps))):
            np.testing.assert_allclose(session.run(None, step)[0], want, rtol=1e-5, atol=1e-5, err_msg=f"step {index}")
            np.testing.assert_allclose(session.query_state()[0].state, cache, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("explicit", [False, True, REWRITTEN])
@pytest.mark.parametrize(
    ("compress", "state_type", "tol"),
    [(False, ov.Type.f32, 1e-5), (True, ov.Type.f32, 1e-3), (False, ov.Type.f16, 2e-3)],
)
def test_kv_cache_against_openvino(tmp_path, explicit, compress, state_type, tol):
    xml = kv_model(tmp_path, compress, state_type, zero_from_seq=True)
    session = open_session(xml, explicit)
    for number, steps in enumerate(STREAMS):
        session.reset_state()
        request = ov_request(xml)  # a fresh compile per stream: see the module docstring
        for index, step in enumerate(steps):
            where = f"stream {number} step {index}"
            assert_close(session.run(None, step)[0], ov_run(request, step)[0], where, tol, tol)
            assert_close(session.query_state()[0].state, ov_states(request)["past.key"], f"{where} state", tol, tol)

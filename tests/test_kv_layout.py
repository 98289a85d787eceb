"""The past/present layout pass (``ortstate.passes.kv_layout``) on a crafted one-layer KV cache.

The IR is built as optimum-intel writes a layer's cache (init ``Broadcast(0, [batch, heads, 0, dim])``,
read through ``Gather(cache, beam_idx)``, grown by ``Concat``). After the pass, the caller feeds an
empty past, then each present back, reordering rows itself (``np.take``) where OpenVINO is fed
``beam_idx``: every output must match OpenVINO's. The pass's refusals leave the model unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino import opset6
from oracle import ov_request, ov_run, save_ir, variable

import ortstate
from ortstate.errors import PassError
from ortstate.model_meta import read_meta
from ortstate.passes.kv_layout import kv_layout

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
):
    """One attention-free layer with a key and a value cache; ``token_ids``: fed ``input_ids``
    through an embedding table instead of ``x``; ``init_length``: the caches start that long;
    ``scaled_past``: the reordered cache is doubled (not a reorder alone any more)."""
    if token_ids:
        ids_input = ops.parameter([-1, -1], np.int64, name="input_ids")
        table = RNG.standard_normal((16, HIDDEN)).astype(np.float32)
        x = ops.gather(ops.constant(table), ids_input, ops.constant(np.int64(0)))
        params = [ids_input]
    else:
        x = ops.parameter([-1, -1, HIDDEN], np.float32, name="x")
        params = [x]
    beam_idx = ops.parameter([-1], np.int32, name="beam_idx")
    batch = ops.gather(ops.shape_of(x), ops.constant(np.array([0], np.int64)), ops.constant(np.int64(0)))
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


def laid_out(xml) -> tuple[onnx.ModelProto, object]:
    model = ortstate.convert(xml, explicit_state=True)
    return model, kv_layout(model, read_meta(model))


def test_caller_reorder_matches_beam_idx(tmp_path) -> None:
    xml = one_layer(tmp_path)
    model, cache = laid_out(xml)
    assert (cache.layers, cache.kv_heads, cache.head_size, cache.beam_input) == (1, HEADS, DIM, "beam_idx")
    graph = model.graph
    assert [i.name for i in graph.input] == ["x", "past_key_values.0.key", "past_key_values.0.value"]
    assert [o.name for o in graph.output] == ["logits", "present.0.key", "present.0.value"]
    assert not any(n.op_type in ("If", "Gather") for n in graph.node)  # the init and the reorder are gone
    assert read_meta(model) is None
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    request = ov_request(xml)
    batch = 3
    past = {f"past_key_values.0.{k}": np.zeros((batch, HEADS, 0, DIM), np.float32) for k in ("key", "value")}
    for step, n in enumerate([4, 1, 1, 1]):
        x = RNG.standard_normal((batch, n, HIDDEN)).astype(np.float32)
        beam = np.arange(batch) if step == 0 else RNG.integers(0, batch, batch)
        want = ov_run(request, {"x": x, "beam_idx": beam.astype(np.int32)})[0]
        past = {k: np.take(v, beam, axis=0) for k, v in past.items()}
        logits, key, value = session.run(None, {"x": x, **past})
        np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)
        past = {"past_key_values.0.key": key, "past_key_values.0.value": value}


def _refused(model: onnx.ModelProto, meta, match: str) -> None:
    before = model.SerializeToString()
    with pytest.raises(PassError, match=match):
        kv_layout(model, meta)
    assert model.SerializeToString() == before


def test_refuses_the_custom_op_form(tmp_path) -> None:
    model = ortstate.convert(one_layer(tmp_path))
    _refused(model, read_meta(model), "made from the explicit form, not the custom-op form")


def test_refuses_a_cache_not_named_as_optimum_names_it(tmp_path) -> None:
    model = ortstate.convert(one_layer(tmp_path, ("past.key", "past_key_values.0.value")), explicit_state=True)
    _refused(model, read_meta(model), r"variable 'past.key' is not a KV cache named past_key_values.N.key\|value")


def test_refuses_a_key_without_its_value(tmp_path) -> None:
    ids = ("past_key_values.0.key", "past_key_values.1.value")
    model = ortstate.convert(one_layer(tmp_path, ids), explicit_state=True)
    _refused(model, read_meta(model), r"not one key and one value for each of layers 0..0")


def test_refuses_a_reorder_that_computes(tmp_path) -> None:
    model = ortstate.convert(one_layer(tmp_path, scaled_past=True), explicit_state=True)
    message = "a Gather selects its rows, but not as a beam reorder the layout can drop"
    _refused(model, read_meta(model), f"variable 'past_key_values.0.(key|value)present.0.(key|value)': {message}")


def test_refuses_a_beam_input_read_elsewhere(tmp_path) -> None:
    model = ortstate.convert(one_layer(tmp_path), explicit_state=True)
    model.graph.node.append(onnx.helper.make_node("Identity", ["beam_idx"], ["beam_copy"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("beam_copy", onnx.TensorProto.INT32, [None]))
    _refused(model, read_meta(model), "input 'beam_idx' is read by more than the KV caches' beam reorder")


def test_refuses_a_name_the_model_already_uses(tmp_path) -> None:
    model = ortstate.convert(one_layer(tmp_path), explicit_state=True)
    model.graph.node.append(onnx.helper.make_node("Identity", ["x"], ["present.0.key"]))
    _refused(model, read_meta(model), "the name 'present.0.key' is already used by the model")

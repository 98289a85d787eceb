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
import pytest
from kv_models import DIM, HEADS, HIDDEN, one_layer
from oracle import ov_request, ov_run

import ortstate
from ortstate.errors import PassError
from ortstate.meta import read_meta
from ortstate.passes.kv_layout import kv_layout

RNG = np.random.default_rng(6)


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

"""``passes/ragged_kv.py``: a length per row for every fused attention over shared KV buffers, and
each row's own keys of its attention bias. That one batched run then equals each stream's alone is
tested on the KV pool against OpenVINO (``tests/streams/test_pool_kv.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

import ortstate
from ortstate.errors import PassError
from ortstate.meta import read_meta
from ortstate.passes.kv_share import share_kv
from ortstate.passes.ragged_kv import KEY_INDEX, SEQLENS, RaggedKv, ragged_kv
from ortstate.passes.to_explicit import to_explicit
from ortstate.passes.walk import graphs

MODELS = Path(__file__).resolve().parents[2] / "models"


def _shared(xml: Path) -> tuple[onnx.ModelProto, object]:
    model = ortstate.convert(xml)
    return model, share_kv(model, to_explicit(model, read_meta(model)))


def _attentions(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for g in graphs(model.graph) for n in g.node if n.op_type == "GroupQueryAttention"]


def test_every_fused_attention_reads_a_length_per_row() -> None:
    model, meta = _shared(MODELS / "llm" / "llama" / "openvino_model.xml")
    inputs = [i.name for i in model.graph.input]
    found = ragged_kv(model, meta)
    assert found == RaggedKv(SEQLENS, KEY_INDEX, len(_attentions(model))) and found.attentions == 2
    added = {i.name: i for i in model.graph.input[len(inputs) :]}
    assert list(added) == [SEQLENS, KEY_INDEX]
    shape = [d.dim_param or d.dim_value for d in added[KEY_INDEX].type.tensor_type.shape.dim]
    assert shape == ["pool_batch", 1, 1, "pool_total"]
    assert added[SEQLENS].type.tensor_type.elem_type == onnx.TensorProto.INT32
    producers = {o: n for g in graphs(model.graph) for n in g.node for o in n.output}
    for node in _attentions(model):
        assert node.input[5] == SEQLENS
        if len(node.input) > 10 and node.input[10]:  # the bias: gathered along the keys by key_index
            gather = producers[node.input[10]]
            assert (gather.op_type, gather.attribute[0].i) == ("GatherElements", 3)
            assert producers[gather.input[1]].input[0] == KEY_INDEX
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # it loads


def test_a_model_without_fused_attention_is_left_alone() -> None:
    model, meta = _shared(MODELS / "accumulator" / "model.xml")
    before = model.SerializeToString()
    assert ragged_kv(model, meta) == RaggedKv("", "", 0)
    assert model.SerializeToString() == before


def test_a_length_no_fused_attention_reads_is_refused_before_any_change() -> None:
    model, meta = _shared(MODELS / "llm" / "llama" / "openvino_model.xml")
    var = meta.variables[0]
    assert var.length_input
    meta = dataclasses.replace(meta, variables=(dataclasses.replace(var, state_input="elsewhere"), *meta.variables[1:]))
    before = model.SerializeToString()
    with pytest.raises(PassError) as info:
        ragged_kv(model, meta)
    assert str(info.value) == f"variable '{var.id}': its cache is not read by a fused attention"
    assert model.SerializeToString() == before

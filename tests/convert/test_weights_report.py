"""``convert/weights_report.py``: how a conversion's weights and attention layers ran, stored in
the model's metadata for ``inspect``."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ortstate.convert.context import AttentionRecord, WeightRecord
from ortstate.convert.external import stub
from ortstate.convert.weights_report import (
    ATTENTION_KEY,
    EXPANDED,
    WEIGHTS_KEY,
    read_attention_report,
    read_report,
    write_attention_report,
    write_report,
)


def _model(*tensors: onnx.TensorProto) -> onnx.ModelProto:
    graph = helper.make_graph([], "g", [], [], initializer=list(tensors))
    return helper.make_model(graph)


def test_weights_are_counted_by_kind_and_shared_initializers_once():
    tensors = [
        numpy_helper.from_array(np.zeros((4, 2, 8), np.uint8), "qk"),  # 64 bytes, shared by q and k
        numpy_helper.from_array(np.zeros(8, np.float32), "qk_scale"),  # 32 bytes
        stub("lm", np.zeros((100, 10), np.uint8)),  # held outside: its length counts
        numpy_helper.from_array(np.zeros(1024, np.float32), "folded"),
    ]
    model = _model(*tensors)
    records = [
        WeightRecord("q", "u4 g16 asym 2x32", "MatMulNBits 4-bit", ["qk", "qk_scale"]),
        WeightRecord("k", "u4 g16 asym 2x32", "MatMulNBits 4-bit", ["qk", "qk_scale"]),
        WeightRecord("lm", "u4 g16 asym 100x20", "MatMulNBits 4-bit", ["lm"]),
        WeightRecord("gone", "u8 per-channel sym 4x4", "MatMulNBits 8-bit", ["pruned"]),  # not in the model
        WeightRecord("chain", "f16+u4", EXPANDED, ["folded"]),
    ]
    write_report(model, records, model.graph)
    rows = read_report(model)
    assert rows == [
        {"source": "u4 g16 asym", "as": "MatMulNBits 4-bit", "count": 3, "bytes": 64 + 32 + 1000},
        {"source": "f16+u4", "as": EXPANDED, "count": 1, "bytes": 4096},  # expanded: the whole source
    ]
    assert [e.key for e in model.metadata_props] == [WEIGHTS_KEY]


def test_no_records_write_nothing_and_unreadable_reports_read_as_none():
    model = _model()
    write_report(model, [], model.graph)
    write_attention_report(model, [])
    assert list(model.metadata_props) == [] and read_report(model) is None
    for value in ("{not json", json.dumps({"a": 1})):
        entry = model.metadata_props.add()
        entry.key, entry.value = WEIGHTS_KEY, value
        assert read_report(model) is None
        del model.metadata_props[:]


def test_attention_layers_are_reported_in_order():
    model = _model()
    records = [
        AttentionRecord("sdpa.0", "GroupQueryAttention", "a causal mask"),
        AttentionRecord("sdpa.1", "composed", "x"),
    ]
    write_attention_report(model, records)
    assert [e.key for e in model.metadata_props] == [ATTENTION_KEY]
    assert read_attention_report(model) == [
        {"layer": "sdpa.0", "as": "GroupQueryAttention", "why": "a causal mask"},
        {"layer": "sdpa.1", "as": "composed", "why": "x"},
    ]
    assert read_report(model) is None

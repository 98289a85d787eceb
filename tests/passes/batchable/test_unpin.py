"""``passes/batchable/unpin.py``: a reshape restating its input's shape with the static batch reads
the batch at run time; an IR Reshape layer keeps its constant."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from batchable_models import F32, run
from onnx import helper, numpy_helper

from ortstate.passes.batchable.unpin import relaxed_sources, unpin_reshapes

SYMBOL = "ortstate.pool.0.0"


def _restating(doc: str = "") -> onnx.ModelProto:
    """x [batch (relaxed), 4] -> Relu -> Reshape to the constant [1, 4] (its own shape at batch 1)."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["relu"], name="relu"),
            helper.make_node("Reshape", ["relu", "to"], ["y"], name="r", doc_string=doc),
        ],
        "restate",
        [helper.make_tensor_value_info("x", F32, [SYMBOL, 4])],
        [helper.make_tensor_value_info("y", F32, None)],
        [numpy_helper.from_array(np.array([1, 4], np.int64), "to")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_relaxed_sources_name_each_static_one_by_its_symbol() -> None:
    assert relaxed_sources(_restating(), {("x", 0), ("gone", 1)}) == {SYMBOL: ("x", 0)}


def test_the_target_reads_the_batch_from_the_input_and_keeps_its_other_entries() -> None:
    model = _restating()
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    with pytest.raises(Exception, match="reshape"):  # pinned: 12 values into [1, 4]
        run(model, {"x": x})
    assert unpin_reshapes(model, {SYMBOL: ("x", 0)}) == 1
    assert [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node] == [
        ("Relu", ["x"], ["relu"]),
        ("Shape", ["x"], ["r/pool_batch_0"]),
        ("Constant", [], ["r/pool_batch_1_start"]),
        ("Constant", [], ["r/pool_batch_1_end"]),
        ("Slice", ["to", "r/pool_batch_1_start", "r/pool_batch_1_end"], ["r/pool_batch_1"]),
        ("Concat", ["r/pool_batch_0", "r/pool_batch_1"], ["r/pool_batch_target"]),
        ("Reshape", ["relu", "r/pool_batch_target"], ["y"]),
    ]
    for rows in (x[:1], x):  # batch 1 as before, and any batch
        np.testing.assert_array_equal(run(model, {"x": rows})[0], np.maximum(rows, 0))


def test_an_ir_reshape_layer_keeps_its_target() -> None:
    model = _restating("layer 'r' (id 3, Reshape-1)")
    assert unpin_reshapes(model, {SYMBOL: ("x", 0)}) == 0
    assert [n.op_type for n in model.graph.node] == ["Relu", "Reshape"]
    assert list(model.graph.node[1].input) == ["relu", "to"]


def test_a_reshape_that_changes_the_shape_is_left() -> None:
    model = _restating()
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array([2, 2], np.int64), "to"))
    assert unpin_reshapes(model, {SYMBOL: ("x", 0)}) == 0
    assert [n.op_type for n in model.graph.node] == ["Relu", "Reshape"]

"""``passes/batchable/shape_math.py``: small integer tensors every run computes the same way (a
split's sizes from a static width) become initializers; what holds the batch stays computed."""

from __future__ import annotations

import numpy as np
import onnx
from batchable_models import F32, run
from onnx import helper, numpy_helper

from ortstate.passes.batchable.shape_math import fold_shape_math


def _split_model() -> onnx.ModelProto:
    """x [B, 8] split in two halves whose sizes are computed from its static width: Shape, Gather,
    Div, Concat; and a reshape to [batch, -1] read from x's shape (which must stay computed)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "one"], ["width"], name="width", axis=0),
        helper.make_node("Div", ["width", "two"], ["half"], name="half"),
        helper.make_node("Concat", ["half", "half"], ["sizes"], name="sizes", axis=0),
        helper.make_node("Split", ["x", "sizes"], ["a", "b"], name="split", axis=1),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0),
        helper.make_node("Concat", ["batch", "minus"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["a", "target"], ["flat"], name="flat"),
    ]
    graph = helper.make_graph(
        nodes,
        "split",
        [helper.make_tensor_value_info("x", F32, ["B", 8])],
        [helper.make_tensor_value_info("flat", F32, None), helper.make_tensor_value_info("b", F32, None)],
        [
            numpy_helper.from_array(np.array([v], np.int64), name)
            for name, v in (("zero", 0), ("one", 1), ("two", 2), ("minus", -1))
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_split_sizes_are_folded_and_the_batch_stays_computed() -> None:
    model = _split_model()
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    before = run(model, {"x": x})
    fold_shape_math(model)
    assert [n.name for n in model.graph.node] == ["shape", "split", "batch", "target", "flat"]
    folded = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    assert folded["sizes"] == [4, 4]
    for got, want in zip(run(model, {"x": x}), before, strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_model_with_nothing_to_fold_is_left_as_it_was() -> None:
    model = _split_model()
    del model.graph.node[1:5]  # no split: only the reshape to the batch
    model.graph.node[-1].input[0] = "x"
    model.graph.output[1].name = "x"
    before = model.SerializeToString()
    fold_shape_math(model)
    assert model.SerializeToString() == before

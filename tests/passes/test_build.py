"""``passes/build.py``: new names none of the model's, and nodes each named as their output."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ortstate.passes.build import NewNames, NodeWriter, add_initializer, namer


def _graph():  # noqa: ANN202
    return helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )


def test_new_names_avoid_the_models_names_and_each_other() -> None:
    fresh = namer(_graph())
    assert [fresh("y"), fresh("relu"), fresh("y"), fresh("z")] == ["y_1", "relu_1", "y_2", "z"]
    assert NewNames({"a"})("a") == "a_1"


def test_a_writer_names_each_node_as_its_output() -> None:
    writer = NodeWriter(NewNames({"p/Add"}), "p")
    total = writer.op("Add", [writer.const([1, 2]), writer.const(np.array([3.0], np.float32))])
    assert total == "p/Add_1"
    made = writer.take()
    assert [(n.op_type, n.name, list(n.input), list(n.output)) for n in made] == [
        ("Constant", "p/const", [], ["p/const"]),
        ("Constant", "p/const_1", [], ["p/const_1"]),
        ("Add", "p/Add_1", ["p/const", "p/const_1"], ["p/Add_1"]),
    ]
    assert numpy_helper.to_array(made[0].attribute[0].t).dtype == np.int64
    assert writer.nodes == []


def test_an_initializer_gets_a_new_name() -> None:
    graph = _graph()
    name = add_initializer(graph, namer(graph), np.array([1], np.int64), "y")
    assert name == "y_1" and [t.name for t in graph.initializer] == ["y_1"]

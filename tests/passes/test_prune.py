"""``passes/prune.py``: what no output needs goes, side-effect ops and subgraph reads stay."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ortstate.passes import prune


def _value(name: str):  # noqa: ANN202
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1])


def test_unused_nodes_and_initializers_go() -> None:
    """y = Add(x, w) is kept; Mul(x, v) -> unused, and its initializer v, are not; a state op's
    node (domain given as side-effect) stays though nothing reads it, and so does what it reads."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "v"], ["unused"], name="mul"),
            helper.make_node("Neg", ["x"], ["to_state"], name="neg"),
            helper.make_node("Assign", ["to_state", "key"], ["token"], name="assign", domain="ai.onnx.contrib"),
            helper.make_node("Add", ["x", "w"], ["y"], name="add"),
        ],
        "g",
        [_value("x"), _value("key")],
        [_value("y")],
        [numpy_helper.from_array(np.ones(1, np.float32), n) for n in ("v", "w")],
    )
    prune(graph, frozenset({"ai.onnx.contrib"}))
    assert [n.name for n in graph.node] == ["neg", "assign", "add"]
    assert [t.name for t in graph.initializer] == ["w"]
    prune(graph)
    assert [n.name for n in graph.node] == ["add"]


def test_a_value_read_only_inside_a_subgraph_is_needed() -> None:
    then = helper.make_graph([helper.make_node("Identity", ["inner"], ["t"])], "then", [], [_value("t")])
    other = helper.make_graph([helper.make_node("Identity", ["w"], ["e"])], "else", [], [_value("e")])
    graph = helper.make_graph(
        [
            helper.make_node("Neg", ["x"], ["inner"], name="neg"),
            helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other),
        ],
        "g",
        [_value("x"), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [_value("y")],
        [numpy_helper.from_array(np.ones(1, np.float32), "w")],
    )
    prune(graph)
    assert [n.name for n in graph.node] == ["neg", "if"]
    assert [t.name for t in graph.initializer] == ["w"]

"""``passes/walk.py``: the one walk over a graph and its subgraphs, on a hand-built model with an If
inside a Loop body reading values of every enclosing graph."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortstate.passes.walk import (
    all_names,
    consumers,
    graphs,
    inner_nodes,
    nodes,
    outer_reads,
    producers,
    rename_uses,
    subgraphs,
    upstream,
)


def _value(name: str, elem_type: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, [1] if elem_type == TensorProto.FLOAT else [])


def nested() -> onnx.GraphProto:
    """x -> a = Neg(x); Loop(body: If(cond, then: t = Add(a, w), else: e = Identity(x))) -> y."""
    then = helper.make_graph([helper.make_node("Add", ["a", "w"], ["t"], name="add")], "then", [], [_value("t")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="id")], "else", [], [_value("e")])
    body = helper.make_graph(
        [
            helper.make_node("If", ["cond_in"], ["r"], name="if", then_branch=then, else_branch=other),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [_value("cond_out", TensorProto.BOOL), _value("r")],
    )
    return helper.make_graph(
        [
            helper.make_node("Neg", ["x"], ["a"], name="neg"),
            helper.make_node("Loop", ["n", "c"], ["c_end", "y"], name="loop", body=body),
        ],
        "main",
        [
            _value("x"),
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [_value("y")],
        [numpy_helper.from_array(np.ones(1, np.float32), "w")],
    )


def test_nodes_reach_every_depth() -> None:
    graph = nested()
    loop = graph.node[1]
    assert [g.name for g in subgraphs(loop)] == ["body"]
    assert sorted(g.name for g in subgraphs(subgraphs(loop)[0].node[0])) == ["else", "then"]
    assert sorted(n.name for n in nodes(graph)) == ["add", "id", "if", "keep", "loop", "neg"]
    assert sorted(n.name for n in inner_nodes(loop)) == ["add", "id", "if", "keep"]
    assert list(inner_nodes(graph.node[0])) == []


def test_graphs_list_each_graph_before_the_ones_inside_it() -> None:
    order = [g.name for g in graphs(nested())]
    assert order[:2] == ["main", "body"] and sorted(order[2:]) == ["else", "then"]


def test_a_subgraphs_reads_count_as_its_owners_inputs() -> None:
    graph = nested()
    assert sorted(outer_reads(graph.node[1])) == ["a", "cond_in", "cond_in", "w", "x"]
    assert producers(graph) == {"a": 0, "c_end": 1, "y": 1}
    assert consumers(graph) == {"x": {0, 1}, "n": {1}, "c": {1}, "a": {1}, "w": {1}, "cond_in": {1}}


def test_all_names_spans_every_graph() -> None:
    names = all_names(nested())
    assert names >= {"x", "n", "c", "y", "w", "a", "c_end", "i", "cond_in", "cond_out", "r", "t", "e"}
    assert names >= {"neg", "loop", "if", "keep", "add", "id"}
    assert "" not in names


def test_rename_uses_reaches_subgraphs_but_not_the_graphs_own_declarations() -> None:
    graph = nested()
    rename_uses(graph, {"a": "a2", "x": "x2", "t": "t2"})
    branches = {g.name: g for g in subgraphs(subgraphs(graph.node[1])[0].node[0])}
    then, other = branches["then"], branches["else"]
    assert list(graph.node[0].input) == ["x2"] and list(graph.node[0].output) == ["a2"]
    assert list(then.node[0].input) == ["a2", "w"] and list(then.node[0].output) == ["t2"]
    assert [o.name for o in then.output] == ["t2"]  # a subgraph's declared outputs follow
    assert list(other.node[0].input) == ["x2"]
    assert [i.name for i in graph.input][0] == "x"  # the caller renames the graph's own inputs


def test_upstream_follows_inputs_and_outer_reads_once_depth_first() -> None:
    graph = nested()
    assert list(upstream(graph, ["y"])) == ["y", "n", "c", "cond_in", "a", "x", "w"]
    assert list(upstream(graph, ["a", "c_end"])) == ["a", "x", "c_end", "n", "c", "cond_in", "w"]
    assert list(upstream(graph, ["w", ""])) == ["w"]  # an initializer; an empty name is no value


def test_upstream_stops_at_values_it_is_told() -> None:
    graph = nested()
    assert list(upstream(graph, ["y"], stop={"a"})) == ["y", "n", "c", "cond_in", "a", "w", "x"]
    assert list(upstream(graph, ["y"], stop={"y"})) == ["y"]


def test_upstream_survives_a_cycle() -> None:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["a"], name="n0"), helper.make_node("Relu", ["a"], ["b"], name="n1")],
        "cycle",
        [_value("x")],
        [_value("b")],
    )
    assert list(upstream(graph, ["b"])) == ["b", "a", "x"]
    assert list(upstream(graph, ["b"], made_by={"b": 1})) == ["b", "a"]  # the caller's producers

"""``ir/walk.py``: the upstream walk over an OpenVINO graph, on hand-built graphs (a cycle too,
which the reader refuses but the walk must survive)."""

from __future__ import annotations

from ortstate.ir import Edge, Graph, Layer, PartialShape, Port
from ortstate.ir.walk import producers_of, upstream


def _layer(lid: int, op: str, inputs: int) -> Layer:
    ports = tuple(Port(i, None, PartialShape(())) for i in range(inputs))
    return Layer(lid, f"l{lid}", op, "opset1", {}, ports, (Port(inputs, None, PartialShape(())),))


def _graph(layers: list[Layer], feeds: dict[int, list[int]]) -> Graph:
    """``feeds[layer id]``: the layer feeding each of its inputs, in order."""
    edges = tuple(
        Edge(src, _layer_of(layers, src).outputs[0].id, dst, i)
        for dst, srcs in feeds.items()
        for i, src in enumerate(srcs)
    )
    return Graph("test.xml", {layer.id: layer for layer in layers}, edges, {}, tuple(layer.id for layer in layers))


def _layer_of(layers: list[Layer], lid: int) -> Layer:
    return next(layer for layer in layers if layer.id == lid)


def diamond() -> Graph:
    """p(0), c(1) -> a(2) = Add(p, c); m(3) = Multiply(a, p); n(4) = Negative(m); r(5) = Result(n)."""
    layers = [
        _layer(0, "Parameter", 0),
        _layer(1, "Const", 0),
        _layer(2, "Add", 2),
        _layer(3, "Multiply", 2),
        _layer(4, "Negative", 1),
        _layer(5, "Result", 1),
    ]
    return _graph(layers, {2: [0, 1], 3: [2, 0], 4: [3], 5: [4]})


def ids(layers) -> list[int]:
    return [layer.id for layer in layers]


def test_upstream_gives_each_layer_once_depth_first() -> None:
    graph = diamond()
    assert ids(upstream(graph, [graph.layers[5]])) == [5, 4, 3, 2, 0, 1]
    assert ids(upstream(graph, [graph.layers[2], graph.layers[3]])) == [2, 0, 1, 3]
    assert ids(upstream(graph, [graph.layers[1]])) == [1]
    assert ids(upstream(graph, [])) == []


def test_follow_chooses_the_inputs_walked_through() -> None:
    graph = diamond()
    first_only = ids(upstream(graph, [graph.layers[3]], lambda layer: (0,)))
    assert first_only == [3, 2, 0]
    stop_at_add = ids(
        upstream(graph, [graph.layers[4]], lambda layer: () if layer.type == "Add" else range(len(layer.inputs)))
    )
    assert stop_at_add == [4, 3, 2, 0]
    assert ids(upstream(graph, [graph.layers[4]], lambda layer: (5,))) == [4]  # indices past the inputs: none


def test_a_cycle_ends_the_walk() -> None:
    layers = [_layer(0, "Parameter", 0), _layer(1, "Add", 2), _layer(2, "Relu", 1)]
    graph = _graph(layers, {1: [0, 2], 2: [1]})
    assert ids(upstream(graph, [graph.layers[2]])) == [2, 1, 0]


def test_producers_of() -> None:
    graph = diamond()
    assert ids(producers_of(graph, graph.layers[3])) == [2, 0]
    assert producers_of(graph, graph.layers[0]) == []

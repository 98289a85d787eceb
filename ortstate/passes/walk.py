"""The one recursive walk over an ONNX graph and its subgraphs (If branches, Loop/Scan bodies).

Every pass, check and report that looks inside subgraphs goes through these functions. They are
iterative, not recursive: a model file chooses its own nesting depth.

ONNX scoping matters to passes in two ways, both handled here: a subgraph may read any value of an
enclosing graph by name (an *outer read*: :func:`outer_reads` counts those as inputs of the node
that owns the subgraph), and no name may be defined twice anywhere in a model (:func:`all_names`
is what a pass must avoid when it makes a new one).
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Iterable, Iterator, Mapping

import onnx

__all__ = [
    "all_names",
    "consumers",
    "graphs",
    "inner_nodes",
    "nodes",
    "outer_reads",
    "producers",
    "rename_in_nodes",
    "rename_reads",
    "rename_uses",
    "sorted_nodes",
    "topological_order",
    "subgraphs",
    "upstream",
]


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held in ``node``'s attributes (an If's two branches, a Loop's body...)."""
    found: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            found.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            found.extend(attr.graphs)
    return found


def graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """``graph`` and all its subgraphs, however deep, each before the graphs inside it (reversed:
    inner graphs first, as a rewrite that rebuilds a graph's node list must go: protobuf copies the
    nodes it is given, subgraphs included)."""
    found = [graph]
    for node in graph.node:
        for sub in subgraphs(node):
            found += graphs(sub)
    return found


def nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of all its subgraphs, however deep."""
    stack = [graph]
    while stack:
        for node in stack.pop().node:
            yield node
            stack.extend(subgraphs(node))


def inner_nodes(node: onnx.NodeProto) -> Iterator[onnx.NodeProto]:
    """Every node inside ``node``'s subgraphs, however deep (not ``node`` itself)."""
    for graph in subgraphs(node):
        yield from nodes(graph)


def outer_reads(node: onnx.NodeProto) -> list[str]:
    """The names ``node``'s subgraphs read: its outer-scope inputs among them (names made inside a
    subgraph are listed too; they can't name a value of the graph around it)."""
    return [name for inner in inner_nodes(node) for name in inner.input if name]


def producers(graph: onnx.GraphProto) -> dict[str, int]:
    """``{value: index of the node of graph (top level) making it}``."""
    return {out: index for index, node in enumerate(graph.node) for out in node.output if out}


def upstream(
    graph: onnx.GraphProto,
    starts: Iterable[str],
    *,
    stop: Container[str] = frozenset(),
    made_by: Mapping[str, int] | None = None,
) -> Iterator[str]:
    """Every value ``starts`` are computed from, the starts included, each once, depth first from the
    first start: through each top-level node's inputs and its subgraphs' outer reads, back to graph
    inputs, initializers and values no node makes. A value in ``stop`` is given but not walked past.

    Args:
        made_by: :func:`producers` of ``graph``, when the caller has it already.
    """
    made_by = producers(graph) if made_by is None else made_by
    pending = list(reversed(list(starts)))
    seen: set[str] = set()
    while pending:
        value = pending.pop()
        if not value or value in seen:
            continue
        seen.add(value)
        yield value
        index = made_by.get(value)
        if index is not None and value not in stop:
            node = graph.node[index]
            pending.extend(reversed([*node.input, *outer_reads(node)]))


def consumers(graph: onnx.GraphProto) -> dict[str, set[int]]:
    """``{value: indices of the nodes of graph (top level) reading it}``, a node's subgraphs' reads
    counted as its own."""
    found: dict[str, set[int]] = {}
    for index, node in enumerate(graph.node):
        for name in (*node.input, *outer_reads(node)):
            if name:
                found.setdefault(name, set()).add(index)
    return found


def all_names(graph: onnx.GraphProto) -> set[str]:
    """Every name defined or declared anywhere in the model's graph: values, nodes, initializers,
    inputs and outputs, subgraphs included."""
    names: set[str] = set()
    stack = [graph]
    while stack:
        g = stack.pop()
        names.update(v.name for v in [*g.input, *g.output, *g.value_info])
        names.update(t.name for t in g.initializer)
        for node in g.node:
            names.update(node.output)
            names.add(node.name)
            stack.extend(subgraphs(node))
    names.discard("")
    return names


def rename_uses(graph: onnx.GraphProto, names: Mapping[str, str]) -> None:
    """Rename values (``{old: new}``) wherever ``graph``'s nodes read or produce them, subgraphs
    included (their declared outputs too). ``graph``'s own inputs, outputs and initializers are
    left as they are (they are the caller's to rename)."""
    rename_in_nodes(graph.node, names)


def rename_in_nodes(top: Iterable[onnx.NodeProto], names: Mapping[str, str]) -> None:
    """:func:`rename_uses` for a list of nodes (a graph being built)."""
    if not names:
        return
    stack: list[tuple[Iterable[onnx.NodeProto], onnx.GraphProto | None]] = [(top, None)]
    while stack:
        node_list, graph = stack.pop()
        for node in node_list:
            for field in (node.input, node.output):
                for i, name in enumerate(field):
                    new = names.get(name)
                    if new is not None:
                        field[i] = new
            stack.extend((sub.node, sub) for sub in subgraphs(node))
        for out in graph.output if graph is not None else ():
            new = names.get(out.name)
            if new is not None:
                out.name = new


def rename_reads(top: Iterable[onnx.NodeProto], names: Mapping[str, str]) -> None:
    """Make every node of ``top`` (subgraphs included) read ``names[old]`` where it read ``old``; what
    the nodes produce keeps its name."""
    stack = [list(top)]
    while stack:
        for node in stack.pop():
            for i, name in enumerate(node.input):
                if name in names:
                    node.input[i] = names[name]
            stack.extend(list(sub.node) for sub in subgraphs(node))


def sorted_nodes(top: Iterable[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``top`` in an order where each node comes after the nodes making what it (or its subgraphs)
    reads, ties kept in their given order. Values no node of ``top`` makes (graph inputs,
    initializers) are there from the start; nodes in a cycle keep their places at the end.
    """
    given = list(top)
    order = topological_order(given)
    placed = set(order)
    order += [index for index in range(len(given)) if index not in placed]
    return [given[index] for index in order]


def topological_order(given: list[onnx.NodeProto]) -> list[int]:
    """Indices of ``given`` in an order where each node comes after the nodes making what it (or its
    subgraphs) reads, each as early in the given order as its inputs allow; nodes in a cycle are
    left out (the list is then shorter than ``given``)."""
    made = {out: index for index, node in enumerate(given) for out in node.output if out}
    waits: list[set[int]] = []
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(given):
        deps = {made[name] for name in (*node.input, *outer_reads(node)) if name in made} - {index}
        waits.append(deps)
        for dep in deps:
            readers.setdefault(dep, []).append(index)
    ready = [index for index, deps in enumerate(waits) if not deps]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for reader in readers.get(index, ()):
            waits[reader].discard(index)
            if not waits[reader]:
                heapq.heappush(ready, reader)
    return order

"""Edges between layers: every edge joins existing ports, every input has one producer, no cycles."""

from __future__ import annotations

import heapq
import xml.etree.ElementTree as ET
from collections.abc import Mapping

from ..errors import IRError
from ..meta import name_prefix
from .graph import Edge, Layer
from .layers import int_attr, layer_where

__all__ = ["parse_edges", "topological_order"]

_SHOWN_ON_CYCLE = 8


def parse_edges(el: ET.Element | None, scope: str, layers: Mapping[int, Layer]) -> tuple[Edge, ...]:
    """The ``<edges>`` of a graph whose layers are ``layers``.

    Raises:
        IRError: an edge attribute is missing or not an integer, an edge names a missing layer or a
            port its layer does not have, an input port has two producers or none.
    """
    edges: list[Edge] = []
    fed: dict[tuple[int, int], Edge] = {}
    for index, e in enumerate(el.findall("edge") if el is not None else [], start=1):
        what = f"{scope}: edge #{index}"
        edge = Edge(*(int_attr(e, k, what) for k in ("from-layer", "from-port", "to-layer", "to-port")))
        what = f"{scope}: edge {edge.from_layer}:{edge.from_port} -> {edge.to_layer}:{edge.to_port}"
        src, dst = layers.get(edge.from_layer), layers.get(edge.to_layer)
        if src is None or dst is None:
            raise IRError(f"{what}: no layer with id {edge.from_layer if src is None else edge.to_layer}")
        if src.output_port(edge.from_port) is None:
            raise IRError(f"{what}: {_name(src)} has no output port {edge.from_port}")
        if dst.input_port(edge.to_port) is None:
            raise IRError(f"{what}: {_name(dst)} has no input port {edge.to_port}")
        key = (edge.to_layer, edge.to_port)
        if key in fed:
            first = layers[fed[key].from_layer]
            raise IRError(
                f"{layer_where(scope, dst.name, dst.id)}: input port {edge.to_port} has two producers: "
                f"{_name(first)} port {fed[key].from_port} and {_name(src)} port {edge.from_port}"
            )
        fed[key] = edge
        edges.append(edge)
    for layer in layers.values():
        for port in layer.inputs:
            if (layer.id, port.id) not in fed:
                raise IRError(f"{layer_where(scope, layer.name, layer.id)}: input port {port.id} is not connected")
    return tuple(edges)


def topological_order(layers: Mapping[int, Layer], edges: tuple[Edge, ...], scope: str) -> tuple[int, ...]:
    """Layer ids in a topological order: Kahn's algorithm taking ready layers in XML order (deterministic).

    Raises:
        IRError: the graph has a cycle; the message lists the layers on one cycle, in edge order.
    """
    indegree = {lid: 0 for lid in layers}
    succ: dict[int, list[int]] = {lid: [] for lid in layers}
    pred: dict[int, list[int]] = {lid: [] for lid in layers}
    for e in edges:
        indegree[e.to_layer] += 1
        succ[e.from_layer].append(e.to_layer)
        pred[e.to_layer].append(e.from_layer)
    position = {lid: i for i, lid in enumerate(layers)}
    heap = [(position[lid], lid) for lid in layers if indegree[lid] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, lid = heapq.heappop(heap)
        order.append(lid)
        for nxt in succ[lid]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(heap, (position[nxt], nxt))
    if len(order) != len(layers):
        cycle = _find_cycle({lid for lid in layers if indegree[lid] > 0}, pred, position)
        shown = [_name(layers[lid]) for lid in cycle[:_SHOWN_ON_CYCLE]]
        if len(cycle) > _SHOWN_ON_CYCLE:
            shown.append(f"... ({len(cycle)} layers)")
        raise IRError(f"{scope}: the graph has a cycle: {' -> '.join(shown + [_name(layers[cycle[0]])])}")
    return tuple(order)


def _find_cycle(stuck: set[int], pred: dict[int, list[int]], position: dict[int, int]) -> list[int]:
    """One cycle among the layers Kahn's algorithm could not order, in edge order.

    Every stuck layer has a stuck producer (that is why it is stuck), so walking producers from any
    of them must come back to a layer already seen: the walk from there on is a cycle.
    """
    walk: list[int] = []
    seen: dict[int, int] = {}
    lid = min(stuck, key=position.__getitem__)
    while lid not in seen:
        seen[lid] = len(walk)
        walk.append(lid)
        lid = min((p for p in pred[lid] if p in stuck), key=position.__getitem__)
    cycle = walk[seen[lid] :][::-1]  # the walk went against the edges
    start = min(range(len(cycle)), key=lambda i: position[cycle[i]])
    return cycle[start:] + cycle[:start]


def _name(layer: Layer) -> str:
    return f"layer '{name_prefix(layer.name)}' (id {layer.id})"

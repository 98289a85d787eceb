"""Drop what no graph output needs: ONNX Runtime runs every node, used or not.

Nodes of a side-effect domain (the custom-op form's state ops) are always kept: they are what a
run is for, even when their output is not read. Only the top-level graph is pruned; a subgraph's
reads of outer values count as uses (see :func:`~ortstate.passes.walk.outer_reads`).
"""

from __future__ import annotations

import onnx

from .walk import outer_reads

__all__ = ["prune"]


def prune(graph: onnx.GraphProto, side_effect_domains: frozenset[str] = frozenset()) -> None:
    """Remove, in place, the nodes nothing needs and the initializers nothing reads."""
    needed = {out.name for out in graph.output}
    kept: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if node.domain in side_effect_domains or any(out in needed for out in node.output):
            kept.append(node)
            needed.update(node.input)
            needed.update(outer_reads(node))
    kept.reverse()
    if len(kept) != len(graph.node):
        del graph.node[:]
        graph.node.extend(kept)
    # by index: ``remove`` compares messages, which serialises them (and fails past 2 GB)
    for index in reversed(range(len(graph.initializer))):
        if graph.initializer[index].name not in needed:
            del graph.initializer[index]

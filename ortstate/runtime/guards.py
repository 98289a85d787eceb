"""Inputs some ONNX Runtime kernels cannot take: refused before the run instead of crashing it.

ONNX Runtime 1.31's ``LSTM`` and ``GRU`` CPU kernels crash the process (segfault or abort) on an
empty ``X`` in some configurations (an LSTM with its activations written out, as converters write
them; a GRU without ``linear_before_reset``), e.g. a batch-0 feed to a dynamic-batch LSTM. ortstate
finds, when a session is made, the graph inputs such a kernel's ``X`` is computed from, and a run
feeding an empty tensor to one of them raises a :class:`~ortstate.RunError` instead.

Only empty *feeds* are caught: a non-empty feed that the model itself slices down to nothing still
reaches the kernel.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import onnx

from ..errors import RunError

__all__ = ["check_not_empty", "empty_input_guards"]

# (domain, op type) -> index of the input that must not be empty
_NO_EMPTY_INPUT = {("", "LSTM"): 0, ("", "GRU"): 0}


def empty_input_guards(graph: onnx.GraphProto) -> dict[str, str]:
    """``{graph input: the kernel it reaches}`` for every graph input an LSTM/GRU ``X`` depends on
    (through any node; a kernel inside a subgraph counts as reached by all its owner's inputs)."""
    producer = {out: node for node in graph.node for out in node.output}
    stack: list[tuple[str, str]] = []
    for node in graph.node:
        index = _NO_EMPTY_INPUT.get((node.domain, node.op_type))
        if index is not None and index < len(node.input):
            stack.append((node.input[index], _describe(node)))
            continue
        inner = next((n for n in _inner_nodes(node) if (n.domain, n.op_type) in _NO_EMPTY_INPUT), None)
        if inner is not None:
            stack.extend((name, _describe(inner)) for name in [*node.input, *_outer_reads(node)])
    initializers = {t.name for t in graph.initializer}
    inputs = {i.name for i in graph.input} - initializers
    guards: dict[str, str] = {}
    seen: set[str] = set()
    stack.reverse()  # depth first from the first kernel: an input reaching several names the first
    while stack:
        value, what = stack.pop()
        if value in seen or not value:
            continue
        seen.add(value)
        if value in inputs:
            guards.setdefault(value, what)
        node = producer.get(value)
        if node is not None:
            stack.extend((name, what) for name in [*node.input, *_outer_reads(node)])
    return guards


def check_not_empty(feeds: Mapping[str, Any], guards: Mapping[str, str]) -> None:
    """Raise :class:`RunError` if a guarded feed is empty."""
    for name, what in guards.items():
        value = feeds.get(name)
        if value is None:
            continue
        size = value.size if isinstance(value, np.ndarray) else np.size(value)
        if size == 0:
            shape = list(np.shape(value))
            raise RunError(
                f"input '{name}' is empty (shape {shape}), and ONNX Runtime's {what} cannot take an empty "
                "input; no variable was changed"
            )


def _describe(node: onnx.NodeProto) -> str:
    layer = f" ({node.doc_string})" if node.doc_string.startswith("layer ") else ""
    return f"{node.op_type} node '{node.name}'{layer}"


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs: list[onnx.GraphProto] = []
    for attr in node.attribute:
        graphs.extend([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs))
    return graphs


def _inner_nodes(node: onnx.NodeProto) -> Iterator[onnx.NodeProto]:
    stack = _subgraphs(node)
    while stack:
        for inner in stack.pop().node:
            yield inner
            stack.extend(_subgraphs(inner))


def _outer_reads(node: onnx.NodeProto) -> list[str]:
    """Names a node's subgraphs read (outer-scope values among them)."""
    return [name for inner in _inner_nodes(node) for name in inner.input]

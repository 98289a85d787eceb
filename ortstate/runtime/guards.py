"""Inputs some ONNX Runtime kernels cannot take: refused before the run instead of crashing it.

ONNX Runtime 1.31's ``LSTM`` and ``GRU`` CPU kernels crash the process (segfault or abort) on a
batch of 0 in some configurations (an LSTM with its activations written out, as converters write
them; a GRU without ``linear_before_reset``), e.g. a batch-0 feed to a dynamic-batch LSTM; a
sequence of 0 steps is fine. When a session is made, ortstate finds the feeds such a kernel's
batch comes from: through ONNX shape inference, the input dim carrying the symbolic batch dim of
its ``X``; where inference cannot tell (or the kernel is inside a subgraph), every input ``X`` is
computed from, any of them empty. A run feeding such an input a zero there raises a
:class:`~ortstate.RunError` instead.

Only *feeds* are checked: a non-empty feed that the model itself slices down to nothing still
reaches the kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from ..errors import RunError
from ..passes.walk import inner_nodes, outer_reads, producers, upstream

__all__ = ["Guard", "check_not_empty", "empty_input_guards"]

# (domain, op type) -> index of the input whose batch (dim 1, ONNX's layout 0) must not be 0
_NO_EMPTY_BATCH = {("", "LSTM"): 0, ("", "GRU"): 0}
_BATCH_AXIS = 1


@dataclass(frozen=True)
class Guard:
    """A feed that must not be empty (``axis`` None) or must not have a 0 at ``axis``."""

    axis: int | None
    kernel: str


def empty_input_guards(model: onnx.ModelProto) -> dict[str, Guard]:
    """``{graph input: Guard}`` for the inputs an LSTM/GRU batch depends on (see the module doc)."""
    graph = model.graph
    anchors: list[tuple[str, str, bool]] = []  # (value, kernel, top level)
    for node in graph.node:
        index = _NO_EMPTY_BATCH.get((node.domain, node.op_type))
        if index is not None and index < len(node.input):
            anchors.append((node.input[index], _describe(node), True))
            continue
        inner = next((n for n in inner_nodes(node) if (n.domain, n.op_type) in _NO_EMPTY_BATCH), None)
        if inner is not None:
            anchors.extend((name, _describe(inner), False) for name in [*node.input, *outer_reads(node)])
    if not anchors:
        return {}
    inputs = [i for i in graph.input if i.name not in {t.name for t in graph.initializer}]
    dims = _inferred_dims(model)
    guards: dict[str, Guard] = {}
    unresolved: list[tuple[str, str]] = []
    for value, kernel, top in anchors:
        shape = dims.get(value) if top else None
        batch = shape[_BATCH_AXIS] if shape is not None and len(shape) > _BATCH_AXIS else None
        if isinstance(batch, int) and batch > 0:
            continue  # a static batch: never 0
        carriers = [
            (i.name, axis)
            for i in inputs
            for axis, d in enumerate(i.type.tensor_type.shape.dim)
            if isinstance(batch, str) and d.dim_param == batch
        ]
        if carriers:
            for name, axis in carriers:
                guards.setdefault(name, Guard(axis, kernel))
        else:
            unresolved.append((value, kernel))
    for name, kernel in _upstream_inputs(graph, {i.name for i in inputs}, unresolved).items():
        guards[name] = Guard(None, kernel)
    return guards


def check_not_empty(feeds: Mapping[str, Any], guards: Mapping[str, Guard]) -> None:
    """Raise :class:`RunError` if a guarded feed is empty where its kernel cannot take it."""
    for name, guard in guards.items():
        value = feeds.get(name)
        if value is None:
            continue
        shape = value.shape if isinstance(value, np.ndarray) else np.shape(value)
        if guard.axis is None:
            if 0 not in shape:
                continue
            what = "is empty"
        elif len(shape) > guard.axis and shape[guard.axis] == 0:
            what = f"has a batch of 0 (dim {guard.axis})"
        else:
            continue
        raise RunError(
            f"input '{name}' {what}: shape {list(shape)}, which ONNX Runtime's {guard.kernel} cannot take "
            "(it crashes); no variable was changed"
        )


def _inferred_dims(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Each value's dims (int, symbolic name, or None) as ONNX shape inference sees them; {} if it fails."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a model inference cannot read (past 2 GB, say): guard conservatively
        return {}
    graph = inferred.graph
    out: dict[str, list[int | str | None]] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape"):
            out[info.name] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in info.type.tensor_type.shape.dim
            ]
    return out


def _upstream_inputs(graph: onnx.GraphProto, inputs: set[str], starts: list[tuple[str, str]]) -> dict[str, str]:
    """``{graph input: kernel}`` for the inputs each start value is computed from (the first start
    reaching an input names it)."""
    made_by = producers(graph)
    found: dict[str, str] = {}
    for value, kernel in starts:
        for name in upstream(graph, [value], made_by=made_by):
            if name in inputs:
                found.setdefault(name, kernel)
    return found


def _describe(node: onnx.NodeProto) -> str:
    layer = f" ({node.doc_string})" if node.doc_string.startswith("layer ") else ""
    return f"{node.op_type} node '{node.name}'{layer}"

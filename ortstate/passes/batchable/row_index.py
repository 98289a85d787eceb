"""Inputs that index rows of the batch: a stream's indices offset to its own row in a batched run.

An optimum-intel export reads each state through ``Gather(state, beam_idx)`` along the batch axis
(the beam reorder): ``beam_idx`` holds rows of the whole batch, one per row. A stream alone is a
batch of one row, so its index picks row 0 (``0`` or ``-1``), and anything else is out of range,
which gives zeros (OpenVINO's Gather, as the converter writes it). Run with other streams, the
same index would pick another stream's row. Such an input is found from the graph (an input that
the indices of a ``Gather`` of a state input along its batch axis are computed from, shapes
aside), and in every batched run each stream's index is made its own row's where it picks row 0,
and the batch's size (out of range there too) where it is out of range.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from ..walk import producers, upstream

__all__ = ["row_index_inputs"]

_SHAPE_OF = ("Shape", "Size")


def row_index_inputs(graph: onnx.GraphProto, state_axes: Mapping[str, int], candidates: set[str]) -> set[str]:
    """The ``candidates`` (graph inputs) that index rows of a state input (``state_axes``: each
    state input's batch axis) through a ``Gather`` along that axis, not through a node that reads
    only shapes."""
    made_by = producers(graph)
    shapes = {o for n in graph.node if n.op_type in _SHAPE_OF for o in n.output}
    found: set[str] = set()
    for node in graph.node:
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or node.input[0] not in state_axes:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if axis == state_axes[node.input[0]]:
            found |= {v for v in upstream(graph, [node.input[1]], stop=shapes, made_by=made_by) if v in candidates}
    return found

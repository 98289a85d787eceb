"""A decoder that can compute its logits for the last position only: a prompt's run then skips the
LM head's work for every other position (on a real-size model, as much as the rest of the model
for a 128-token prompt), as OpenVINO GenAI slices its models before the LM head.

The final normalisation before the logits works position by position, so the rows after it can be
cut to the last one without changing that row. This pass finds it (the nearest
``SimplifiedLayerNormalization``/``LayerNormalization`` upstream of the first graph output,
through subgraph reads too) and makes every reader of its output read
``Slice(norm, Where(last, -1, 0), MAX, axis=1)`` instead, with ``last`` a new bool scalar input
``ortstate.pool.last_logits``: fed False, the graph computes what it did.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .build import namer
from .walk import outer_reads, producers, rename_reads

__all__ = ["LAST_LOGITS", "slice_last_logits"]

LAST_LOGITS = "ortstate.pool.last_logits"
_NORMS = ("SimplifiedLayerNormalization", "LayerNormalization", "SkipSimplifiedLayerNormalization")
_SEARCH = 64  # nodes looked at upstream of the logits


def _final_norm(graph: onnx.GraphProto) -> onnx.NodeProto | None:
    made = producers(graph)
    seen: set[int] = set()
    queue = deque([graph.output[0].name])
    while queue and len(seen) < _SEARCH:
        index = made.get(queue.popleft())
        if index is None or index in seen:
            continue
        seen.add(index)
        node = graph.node[index]
        if node.op_type in _NORMS:
            return node
        queue.extend(n for n in [*node.input, *outer_reads(node)] if n)
    return None


def slice_last_logits(model: onnx.ModelProto) -> str | None:
    """Give ``model`` the ``ortstate.pool.last_logits`` input (see the module docstring), in place;
    returns its name, or None (nothing changed) where no final normalisation is found."""
    graph = model.graph
    if not graph.output:
        return None
    norm = _final_norm(graph)
    if norm is None:
        return None
    fresh = namer(graph)

    flag, hidden = fresh(LAST_LOGITS), norm.output[0]
    start, sliced = fresh(f"{hidden}_last_start"), fresh(f"{hidden}_last")
    consts = {k: fresh(f"ortstate.last_{k}") for k in ("last", "all", "end", "axis")}
    values = {"last": [-1], "all": [0], "end": [np.iinfo(np.int64).max], "axis": [1]}
    for key, name in consts.items():
        graph.initializer.append(numpy_helper.from_array(np.array(values[key], np.int64), name))
    graph.input.append(helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, []))
    position = list(graph.node).index(norm) + 1
    rename_reads([n for n in graph.node if n is not norm], {hidden: sliced})
    made = [
        helper.make_node("Where", [flag, consts["last"], consts["all"]], [start], name=fresh(f"{start}_node")),
        helper.make_node(
            "Slice", [hidden, start, consts["end"], consts["axis"]], [sliced], name=fresh(f"{sliced}_node")
        ),
    ]
    for offset, node in enumerate(made):
        graph.node.insert(position + offset, node)
    return flag

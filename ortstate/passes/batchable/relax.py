"""The batch made dynamic: every dim that could be the batch a symbol of its own.

The pool loads a model's explicit form with every dimension of a graph input or output that could
be the batch (a static 1 or a dynamic dim) made dynamic, the way OpenVINO's ``set_batch`` re-shapes
a model's Parameters; :mod:`.axes` then follows the batch through the graph.
"""

from __future__ import annotations

import onnx
from onnx import helper

from ...meta import ModelMeta
from ..build import NewNames
from .unpin import RELAXED

__all__ = ["relax_batch"]

_RECURRENT = ("LSTM", "GRU", "RNN")
_LENS = 4  # their sequence_lens input


def relax_batch(model: onnx.ModelProto, meta: ModelMeta) -> dict[str, tuple[int | None, ...]]:
    """Make every graph input's and output's dims that could be the batch (static 1s) dynamic, each
    a symbol of its own, in place; returns the caller-fed inputs' dims as they were (None: dynamic)."""
    graph = model.graph
    flags = {v.init_flag for v in meta.variables if v.init_flag}
    states = {v.state_input for v in meta.variables}
    was: dict[str, tuple[int | None, ...]] = {}
    for n, value in enumerate([*graph.input, *graph.output]):
        if value.name in flags or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if n < len(graph.input) and value.name not in states:
            was[value.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
        for axis, d in enumerate(dims):
            if not d.HasField("dim_value") or d.dim_value == 1:
                d.dim_param = f"{RELAXED}{n}.{axis}"
    # Shapes inferred for the static batch would contradict the batched run's.
    del graph.value_info[:]
    _lengths_per_row(graph)
    return was


def _lengths_per_row(graph: onnx.GraphProto) -> None:
    """Expand every LSTM/GRU/RNN ``sequence_lens`` to the rows of its ``X``: a model of batch 1 may
    compute one length for its one row (``Shape(x)[1:2]``); the streams of one run have one length."""
    fresh = NewNames({n for node in graph.node for n in (*node.input, *node.output)} | {i.name for i in graph.input})
    rewritten: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type in _RECURRENT and len(node.input) > _LENS and node.input[_LENS]:
            batch = 0 if any(a.name == "layout" and a.i == 1 for a in node.attribute) else 1
            rows, lens = fresh(f"{node.name}/pool_rows"), fresh(f"{node.name}/pool_lens")
            rewritten.append(helper.make_node("Shape", [node.input[0]], [rows], start=batch, end=batch + 1))
            rewritten.append(helper.make_node("Expand", [node.input[_LENS], rows], [lens]))
            node.input[_LENS] = lens
        rewritten.append(node)
    del graph.node[:]
    graph.node.extend(rewritten)

"""An init whose value needs no run: zeros of a shape made of constants and dims of the model's
inputs, as optimum-intel initialises every KV cache::

    Broadcast(0, Concat(Gather(ShapeOf(input_ids), 0), [kv_heads, 0, head_size]))

The explicit form then feeds such a variable's first value itself (zeros, empty along the cache's
axis), so the graph reads the state input directly: no ``If`` choosing between init and state,
which copies the whole cache through a branch on every step.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Layer
from .folding import constant_value

__all__ = ["InitDim", "zeros_from_input_dims"]

# A dim of the init's shape: a constant, or (graph input name, axis): that input's dim.
InitDim = int | tuple[str, int]


def _const_ints(graph: Graph, layer: Layer) -> list[int] | None:
    value = constant_value(graph, layer)
    if value is None or value.dtype.kind not in "iu" or value.ndim > 1:
        return None
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _dims(graph: Graph, layer: Layer) -> list[InitDim] | None:
    """The 1-D int shape value ``layer`` makes, dim by dim, or None where one is anything else."""
    const = _const_ints(graph, layer)
    if const is not None:
        return list(const)
    if layer.type in ("Convert", "Squeeze", "Unsqueeze", "Reshape") and layer.inputs:
        inner = _dims(graph, graph.producer(layer, 0)[0])
        return inner if inner is not None and len(inner) == 1 else None
    if layer.type == "Concat" and layer.int_attr("axis") in (0, -1):
        parts: list[InitDim] = []
        for i in range(len(layer.inputs)):
            part = _dims(graph, graph.producer(layer, i)[0])
            if part is None:
                return None
            parts += part
        return parts
    if layer.type == "Gather" and len(layer.inputs) >= 3:
        shape_of, index, axis = (graph.producer(layer, i)[0] for i in range(3))
        picked, along = _const_ints(graph, index), _const_ints(graph, axis)
        if shape_of.type != "ShapeOf" or picked is None or along not in ([0], []) or len(picked) != 1:
            return None
        if layer.int_attr("batch_dims") != 0:
            return None
        source = graph.producer(shape_of, 0)[0]
        rank = source.outputs[0].shape.rank if source.type == "Parameter" else None
        if rank is None or not -rank <= picked[0] < rank:
            return None
        return [(source.tensor_name(), picked[0] % rank)]
    return None


def zeros_from_input_dims(graph: Graph, read: Layer) -> list[InitDim] | None:
    """The shape of ``read``'s init when that init is zeros broadcast to a shape of constants and
    input dims (see the module docstring), else None."""
    if not read.inputs:
        return None
    bcast = graph.producer(read, 0)[0]
    if bcast.type != "Broadcast" or len(bcast.inputs) != 2 or bcast.attrs.get("mode", "numpy") == "explicit":
        return None
    fill = constant_value(graph, graph.producer(bcast, 0)[0])
    if fill is None or fill.size != 1 or np.any(fill):
        return None
    dims = _dims(graph, graph.producer(bcast, 1)[0])
    if dims is None or any(isinstance(d, int) and d < 0 for d in dims):
        return None
    return dims

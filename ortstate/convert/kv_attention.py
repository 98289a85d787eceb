"""Recognise a stateful decoder's self-attention in the IR: ScaledDotProductAttention-13 whose key
and value are a KV variable with this step's rows appended, the pattern ONNX Runtime's fused
``com.microsoft.GroupQueryAttention`` kernel takes.

What optimum-intel (and any export of a Hugging Face decoder with its cache in variables) writes,
per layer and for key and value alike::

    past = ReadValue(init)                         # [batch, kv_heads, past_len, head_size]
    past = Gather(past, beam_idx, axis=0)          # optional: the beam reorder
    full = Concat(past, new, axis=-2)              # -> Assign(full): the next value
    full = Reshape(Broadcast(Unsqueeze(full, 2)))  # optional: repeat_kv, kv_heads -> heads
    out  = ScaledDotProductAttention(query, full_key, full_value, mask?, scale?, sink?)

A sink (gpt-oss's attention sinks: one logit per head joining each softmax) qualifies when it is a
constant that varies along the heads alone: the kernel's ``head_sink`` is one value per head.

:func:`match` returns a :class:`KvAttention` naming the IR values the fused kernel needs, or the
reason (one line, for ``inspect``) why this layer keeps the composed attention. Nothing here is
keyed on a model's name: only the graph decides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Layer
from .folding import constant_value

__all__ = ["KvAttention", "KvSide", "match"]

_QUERY, _KEY, _VALUE, _MASK, _SCALE, _SINK = range(6)


@dataclass(frozen=True)
class KvSide:
    """Key or value: the Concat appending this step's rows to the variable's past rows."""

    concat: Layer  # Concat(past, new, axis=-2); its output is what the Assign stores
    read: Layer  # the ReadValue giving the past rows
    reorder: str | None  # the graph input reordering the past rows along axis 0 (beam_idx), if any
    shapes: tuple[Layer, ...]  # ShapeOf layers reading the Concat: they get its shape from its inputs
    past_shapes: tuple[Layer, ...]  # ShapeOf layers reading the reordered past rows


@dataclass(frozen=True)
class KvAttention:
    """One self-attention over a KV variable, as :func:`match` found it."""

    key: KvSide
    value: KvSide
    heads: int
    kv_heads: int
    head_size: int
    scale: float
    sink: np.ndarray | None = None  # f32 [heads]: the kernel's head_sink, where the layer has one


def _static(layer: Layer, index: int, axis: int) -> int | None:
    dims = layer.inputs[index].shape.dims
    if dims is None or len(dims) != 4 or not dims[axis].is_static:
        return None
    return dims[axis].lo


def _through_repeat(graph: Graph, layer: Layer, index: int) -> tuple[Layer, list[Layer]]:
    """The producer of ``layer``'s input ``index`` seen through repeat_kv (Reshape of a Broadcast of
    an Unsqueeze on axis 2), and the layers of that repeat."""
    src = graph.producer(layer, index)[0]
    chain: list[Layer] = []
    if src.type == "Reshape":
        bcast = graph.producer(src, 0)[0]
        if bcast.type == "Broadcast" and len(bcast.inputs) == 2:
            unsq = graph.producer(bcast, 0)[0]
            axes = constant_value(graph, graph.producer(unsq, 1)[0]) if unsq.type == "Unsqueeze" else None
            if axes is not None and np.asarray(axes).reshape(-1).tolist() in ([2], [-3]):
                chain = [src, bcast, unsq]
                src = graph.producer(unsq, 0)[0]
    return src, chain


def _side(graph: Graph, sdpa: Layer, index: int, what: str) -> KvSide | str:
    concat, chain = _through_repeat(graph, sdpa, index)
    if concat.type != "Concat" or len(concat.inputs) != 2:
        return f"{what} is not a variable's past rows with this step's rows appended"
    axis = concat.int_attr("axis")
    if axis not in (2, -2):
        return f"{what}'s Concat is on axis {axis}, not the sequence axis"
    past = graph.producer(concat, 0)[0]
    reorder, past_shapes = None, ()
    if past.type == "Gather":
        gather = past
        past_shapes = tuple(dst for dst, _ in graph.consumers(gather, 0) if dst.type == "ShapeOf")
        reorder = _reorder_input(graph, gather, concat)
        if reorder is None:
            return f"{what}'s past rows go through a Gather that is not a reorder of the batch by an input"
        past = graph.producer(gather, 0)[0]
        # The runtime reorders the variable's value itself: nothing may read it before the reorder.
        if any(dst.id != gather.id for dst, _ in graph.consumers(past, 0)):
            return f"{what}'s variable is also read before its reorder"
    if past.type != "ReadValue":
        return f"{what}'s past rows do not come from a variable"
    # The concatenated value may go only to the Assign, (through the repeat) to this attention and to
    # ShapeOf: the fused kernel makes it anew, and any other reader would keep the copy it saves.
    allowed = {sdpa.id, *(layer.id for layer in chain)}
    shapes = []
    for dst, _ in graph.consumers(concat, 0):
        if dst.type == "ShapeOf":
            shapes.append(dst)
        elif dst.type != "Assign" and dst.id not in allowed:
            return f"{what}'s concatenated cache is also read by {dst.describe()}"
    for link in chain[1:]:
        if len(graph.consumers(link, 0)) != 1:
            return f"{what}'s repeated heads are also read elsewhere"
    return KvSide(concat, past, reorder, tuple(shapes), past_shapes)


def _reorder_input(graph: Graph, gather: Layer, concat: Layer) -> str | None:
    """The graph input by which ``gather`` reorders its data's rows (axis 0, read by ``concat``
    and ShapeOf), as optimum-intel's ``beam_idx`` does; None for any other Gather."""
    if len(gather.inputs) < 3 or gather.int_attr("batch_dims") != 0:
        return None
    indices, axis = graph.producer(gather, 1)[0], constant_value(graph, graph.producer(gather, 2)[0])
    if indices.type != "Parameter" or axis is None or np.asarray(axis).reshape(-1).tolist() != [0]:
        return None
    if indices.outputs[0].shape.rank != 1:
        return None
    if any(dst.id != concat.id and dst.type != "ShapeOf" for dst, _ in graph.consumers(gather, 0)):
        return None
    return indices.tensor_name()


def match(graph: Graph, sdpa: Layer) -> KvAttention | str:
    """The KV attention ``sdpa`` (a ScaledDotProductAttention-13 layer) computes, or why it is not one
    the fused kernel can run exactly."""
    if sdpa.attrs.get("causal", "false").strip().lower() in ("true", "1"):
        return "causal attribute (a top-left aligned mask; the kernel aligns to the cache's end)"
    if any(sdpa.inputs[i].element_type is None or sdpa.inputs[i].element_type.name != "f32" for i in range(3)):
        return "not f32"
    heads, head_size = _static(sdpa, _QUERY, 1), _static(sdpa, _QUERY, 3)
    if heads is None or head_size is None:
        return "the query's heads or head size are not static"
    if head_size % 8:
        return f"head size {head_size} is not a multiple of 8 (the kernel's requirement)"
    key, value = _side(graph, sdpa, _KEY, "key"), _side(graph, sdpa, _VALUE, "value")
    for side in (key, value):
        if isinstance(side, str):
            return side
    assert isinstance(key, KvSide) and isinstance(value, KvSide)
    kv_heads = _static(key.concat, 0, 1)
    if kv_heads is None or kv_heads != _static(value.concat, 0, 1) or heads % kv_heads:
        return "the cache's heads are not static or do not divide the query's"
    if _static(key.concat, 0, 3) != head_size or _static(value.concat, 0, 3) != head_size:
        return "key, value and query head sizes differ"
    scale = 1.0 / float(np.sqrt(np.float32(head_size)))
    if len(sdpa.inputs) > _SCALE:
        given = constant_value(graph, graph.producer(sdpa, _SCALE)[0])
        if given is None or np.asarray(given).size != 1:
            return "the scale is not a constant scalar"
        scale = float(np.asarray(given, np.float32).reshape(()))
    sink = _head_sink(graph, sdpa, heads) if len(sdpa.inputs) > _SINK else None
    if isinstance(sink, str):
        return sink
    if len(sdpa.inputs) > _MASK:
        etype = sdpa.inputs[_MASK].element_type
        if etype is None or etype.name not in ("boolean", "f32"):
            return "the mask is neither boolean nor f32"
        rank = sdpa.inputs[_MASK].shape.rank
        if rank is None or rank > 4:
            return "the mask's rank is not known or above 4"
    return KvAttention(key, value, heads, kv_heads, head_size, scale, sink)


def _head_sink(graph: Graph, sdpa: Layer, heads: int) -> np.ndarray | str:
    """The sink input as one f32 value per head, or why the kernel cannot take it."""
    given = constant_value(graph, graph.producer(sdpa, _SINK)[0])
    if given is None:
        return "attention sinks computed at run time (the kernel's head_sink is a value per head)"
    sink = np.asarray(given, np.float32)
    if sink.ndim > 4 or any(d != 1 for k, d in enumerate(sink.shape[::-1]) if k != 2):
        return f"attention sinks of shape {list(sink.shape)} (the kernel's head_sink is one value per head)"
    if sink.ndim >= 3 and sink.shape[-3] not in (1, heads):
        return f"attention sinks for {sink.shape[-3]} heads, the query has {heads}"
    return np.ascontiguousarray(np.broadcast_to(sink.reshape(-1), (heads,)))

"""Reshapes that restate their input's shape with the static batch, given the batch read at run time.

A converter working at batch 1 may reshape a value to the shape it already has, with that shape's
dims written as numbers from the IR's static shapes: ortstate's TensorIterator and Loop outputs, a
scan ``[iterations, 1, 1, 16]`` reshaped to ``Concat(iterations, [1, 1, 16])`` so that zero
iterations still give that shape. Once the batch is dynamic the constant 1 pins it. Where shape
inference shows such a ``Reshape``'s output equal to its input dim by dim, except on dims where
the input has a symbol of the batch (one of the batch relaxation's, :data:`RELAXED`, or the batch
followed through the whole model) and the target holds 1, the target's entry there becomes the dim
of a graph input that was a static 1, read at run time: at batch 1 the model is what it was, and
at any batch the reshape restates its input's shape as it did, as OpenVINO's ``set_batch`` infers
that shape again. An IR Reshape layer keeps its target: that constant is the IR's own, it pins the
batch for ``set_batch`` too, and the pool refuses it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..build import NewNames
from ..walk import graphs, nodes
from .axes import Dims, infer_dims, light_copy

__all__ = ["RELAXED", "relaxed_sources", "unpin_reshapes"]

# the layer an IR Reshape became (see the module)
_IR_RESHAPE = re.compile(r"\(id \d+, Reshape-\d+\)$")
RELAXED = "ortstate.pool."  # + "<n>.<axis>": dim ``axis`` of the graph's n-th input (or output, after them)


def unpin_reshapes(
    model: onnx.ModelProto, sources: Mapping[str, tuple[str, int]], shapes: Mapping[str, Dims] | None = None
) -> int:
    """Give every such ``Reshape`` of ``model`` (subgraphs included) the batch from a graph input,
    in place; returns how many.

    Args:
        sources: for each symbol that stands for the batch, the graph input and axis to read it
            from: one whose dim was a static 1 (one stream feeds 1 there, so every step a lone
            session takes is unchanged).
        shapes: every value's dims, as shape inference gives them; None: inferred here.
    """
    shapes = infer_dims(light_copy(model)) if shapes is None else shapes
    inputs = [i.name for i in model.graph.input]
    fresh = NewNames({n for node in nodes(model.graph) for n in (*node.input, *node.output)} | set(inputs))
    count = 0
    for graph in reversed(graphs(model.graph)):  # inner first: rewriting a graph copies its nodes
        made: list[onnx.NodeProto] = []
        for node in graph.node:
            reshape = (
                node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and not _IR_RESHAPE.search(node.doc_string)
            )
            pinned = _pinned(node, shapes, sources) if reshape else None
            if pinned:
                made += _rescale(node, pinned, fresh)
                count += 1
            made.append(node)
        if len(made) != len(graph.node):
            del graph.node[:]
            graph.node.extend(made)
    return count


def relaxed_sources(model: onnx.ModelProto, ones: Collection[tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """The symbols the batch relaxation gave the graph inputs' dims that were static 1s (``ones``:
    (input, axis)), each with its input and axis."""
    index = {i.name: n for n, i in enumerate(model.graph.input)}
    return {f"{RELAXED}{index[name]}.{axis}": (name, axis) for name, axis in ones if name in index}


def _pinned(
    node: onnx.NodeProto, shapes: Mapping[str, Dims], sources: Mapping[str, tuple[str, int]]
) -> list[tuple[str, int] | None] | None:
    """Per dim of ``node``'s output, the graph input and axis whose dim the target pins to 1 (None
    where the target keeps the input's dim); None where the reshape is not such a restatement."""
    given, made = shapes.get(node.input[0]), shapes.get(node.output[0])
    if given is None or made is None or len(given) != len(made):
        return None
    pinned: list[tuple[str, int] | None] = []
    for a, b in zip(given, made):
        if isinstance(a, str) and a in sources and b == 1:
            pinned.append(sources[a])
        elif a is None or a != b:
            return None
        else:
            pinned.append(None)
    return pinned if any(pinned) else None


def _rescale(node: onnx.NodeProto, sources: list[tuple[str, int] | None], new_name: NewNames) -> list[onnx.NodeProto]:
    """Nodes making ``node``'s target with the batch dims of ``sources`` (its own entries elsewhere),
    entry by entry (so that shape inference's data propagation follows); rewires ``node``."""
    base = f"{node.name or node.output[0]}/pool_batch"
    made, parts = [], []

    def fresh(what: str) -> str:
        return new_name(f"{base}_{what}")

    for k, source in enumerate(sources):
        part = fresh(str(k))
        if source is None:
            bounds = [fresh(f"{k}_{end}") for end in ("start", "end")]
            for name, at in zip(bounds, (k, k + 1)):
                made.append(
                    helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array([at], np.int64)))
                )
            made.append(helper.make_node("Slice", [node.input[1], *bounds], [part]))
        else:
            value, axis = source
            made.append(helper.make_node("Shape", [value], [part], start=axis, end=axis + 1))
        parts.append(part)
    target = fresh("target")
    made.append(helper.make_node("Concat", parts, [target], axis=0))
    node.input[1] = target
    return made

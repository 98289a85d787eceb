"""The beam reorder of a KV cache in an ONNX graph: the ``Gather(cache, beam_idx)`` optimum-intel
puts in front of every KV variable (with the converter's zeros for out-of-range indices), found so
that :func:`~.kv_layout.kv_layout` can hand the reorder to the caller, as onnxruntime-genai and
optimum expect.

The IR side of the same question (is a variable read through a beam reorder at all, for the
generator's feeding rules) is :mod:`ortstate.decoders.state_layout`: it reads the IR before any
conversion, where this pass reads the converted graph and must find the exact nodes to remove.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..errors import PassError
from .walk import outer_reads, producers, upstream

__all__ = ["beam_reorder", "constant_values"]


def constant_values(graph: onnx.GraphProto) -> set[str]:
    """Values that are the same every run: initializers and what is computed from them alone."""
    known = {t.name for t in graph.initializer}
    for node in graph.node:
        if all(i in known for i in node.input if i) and not outer_reads(node):
            known.update(node.output)
    return known


def beam_reorder(
    graph: onnx.GraphProto, var_id: str, state: set[str], inputs: set[str], constants: set[str]
) -> tuple[str, int, str] | None:
    """The beam reorder of one cache: ``(its result, the node making it, the beam input)``, None if
    no ``Gather`` selects the cache's rows.

    The reorder is what the cache (``state``: its value, under any of these names) and one other
    graph input compute together with constants alone, when that holds a ``Gather(cache, axis=0)``
    and ends in one value read by the rest of the graph (or several, all computed from the
    first), made of the cache's rows and constant zeros alone (:func:`_selects`: the converter's
    Gather gives OpenVINO's zeros for out-of-range indices). With the beam input ``arange(batch)``
    its result is the cache, so the cache replaces it: the caller reorders before it feeds the past.
    """
    gathers = [
        i
        for i, node in enumerate(graph.node)
        if node.op_type == "Gather" and node.input[0] in state and _axis(node) == 0
    ]
    if not gathers:
        return None
    refused = PassError(
        f"variable '{var_id}': a Gather selects its rows, but not as a beam reorder the layout can drop"
    )
    sources = _graph_inputs_of(graph, graph.node[gathers[0]].input[1], inputs - state, state)
    if len(sources) != 1:
        raise refused
    beam = sources.pop()
    inside, both = _computed_with(graph, beam, state, constants)
    if not set(gathers) <= inside:
        raise refused
    graph_outputs = {o.name for o in graph.output}
    exits = {
        name
        for index, node in enumerate(graph.node)
        if index not in inside
        for name in (*node.input, *outer_reads(node))
        if name in both
    } | (both & graph_outputs)
    producer = producers(graph)
    result = min(exits, key=lambda name: producer.get(name, -1), default=None)
    if result is None or result not in producer:
        raise refused
    downstream = {result}  # the cache's shape read after the reorder, say: it reads the cache then
    for index in sorted(inside):
        if any(i in downstream for i in graph.node[index].input):
            downstream.update(graph.node[index].output)
    if not exits <= downstream or not _selects(graph, result, state, both, constants, producer):
        raise refused
    return result, producer[result], beam


def _computed_with(
    graph: onnx.GraphProto, beam: str, state: set[str], constants: set[str]
) -> tuple[set[int], set[str]]:
    """The nodes computed from the beam input, the cache and constants alone that read the beam
    input (by index), and the values among their outputs that also depend on the cache."""
    known = state | constants | {beam}
    derived = {beam}  # values that depend on the beam input
    both: set[str] = set()  # ... and on the cache
    inside: set[int] = set()
    for index, node in enumerate(graph.node):
        reads = [i for i in node.input if i]
        if outer_reads(node) or not all(i in known for i in reads):
            continue
        known.update(node.output)  # the cache's shape, say: kept, but the reorder may read it
        if any(i in derived for i in reads):
            inside.add(index)
            derived.update(node.output)
            if any(i in both or i in state for i in reads):
                both.update(node.output)
    return inside, both


def _selects(
    graph: onnx.GraphProto, result: str, state: set[str], both: set[str], constants: set[str], producer: dict[str, int]
) -> bool:
    """Whether ``result`` is made of the cache's rows or constant zeros alone: every node from the
    cache to it is a ``Gather`` of the cache's rows, a ``Where`` between such a value and constant
    zeros (where an index is out of range), or an ``Identity``. With the indices ``arange(batch)``
    it then *is* the cache."""
    stack, seen = [result], set()
    while stack:
        name = stack.pop()
        if name in seen or name in state:
            continue
        seen.add(name)
        node = graph.node[producer[name]]
        if node.op_type == "Gather" and node.input[0] in state and _axis(node) == 0:
            continue
        if node.op_type == "Identity" and node.input[0] in both | state:
            stack.append(node.input[0])
        elif node.op_type == "Where" and node.input[0] not in both:
            values = [v for v in node.input[1:] if v in both | state]
            zeros = [v for v in node.input[1:] if v in constants and _is_zero(graph, v)]
            if len(values) != 1 or len(zeros) != 1:
                return False
            stack.extend(values)
        else:
            return False
    return True


def _is_zero(graph: onnx.GraphProto, name: str) -> bool:
    """Whether ``name`` is an initializer or ``Constant`` node holding zeros only."""
    tensor = next((t for t in graph.initializer if t.name == name), None)
    if tensor is None:
        node = next((n for n in graph.node if name in n.output and n.op_type == "Constant"), None)
        tensor = next((a.t for a in node.attribute if a.name == "value"), None) if node is not None else None
    if tensor is None or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return False
    return not np.any(onnx.numpy_helper.to_array(tensor))


def _graph_inputs_of(graph: onnx.GraphProto, value: str, inputs: set[str], stop: set[str]) -> set[str]:
    """The graph inputs among ``inputs`` that ``value`` is computed from, not looking past ``stop``."""
    found = upstream(graph, [value], stop=stop)
    return {name for name in found if name in inputs and name not in stop}


def _axis(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 0)

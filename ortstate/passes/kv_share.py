"""Explicit form: a KV variable the fused attention appends to can live in a buffer with spare
capacity, bound as both its state input and its state output, so a step writes only its new rows.

ONNX Runtime's ``GroupQueryAttention`` writes in place when its past and present are the same
memory and ``total_sequence_length`` is at most the buffer's length (its "static cache"); with a
past of exactly the cache's length it appends into a new present instead. This pass lets one graph
run both ways: it gives the variable a length input ``ortstate.len.<id>`` (int64 scalar: how many
rows of the state input are the value) and a length output ``ortstate.len_out.<id>`` (the rows
after the run), and makes every other reader see only the valid rows:

- ``Shape`` of the state input reads the logical shape (the length on the cache axis, 2); one
  that asks for the cache axis alone (a past length) reads the length itself, and the whole shape
  is built only for the others: each node is a few microseconds of every step of a small model;
- the composition in the attention ``If``'s other branch (batches above 1 continuing with several
  rows, which the kernel refuses) reads ``Slice(state, 0, length)``.

A runner feeding exact values (length = their dim 2) gets what it got before; one feeding a larger
buffer (see :mod:`ortstate.runtime.kv_buffers`) gets the in-place append. A variable qualifies when
its state input is read only by ``Shape`` nodes and by the ``If`` whose fused branch takes it as a
``GroupQueryAttention`` past and gives that kernel's present as the variable's state output, as
the converter writes a decoder's attention (:mod:`ortstate.convert.ops.attention`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper

from ..meta import ModelMeta, VariableMeta, length_input_name, length_output_name
from .build import add_initializer, namer
from .walk import consumers, producers, rename_reads, sorted_nodes, subgraphs

__all__ = ["share_kv", "shares_all", "shares_any"]

_AXIS = 2
_PAST = {3: 1, 4: 2}  # GroupQueryAttention input (past_key, past_value) -> its present output
_SPAN = (("start", 0), ("end", 4))  # a Shape node's attributes over a rank-4 cache, and their defaults


@dataclasses.dataclass
class _Plan:
    var: VariableMeta
    shapes: list[int]  # top-level Shape nodes reading the state input
    branch: onnx.GraphProto  # the If's composed branch, which reads the valid rows only
    total: str  # the kernel's total_sequence_length (int32 scalar): the rows after the run


def _branch(node: onnx.NodeProto, name: str) -> onnx.GraphProto | None:
    return next((a.g for a in node.attribute if a.name == name and a.type == onnx.AttributeProto.GRAPH), None)


def _plan(graph: onnx.GraphProto, var: VariableMeta, made: dict[str, int], used: dict[str, set[int]]) -> _Plan | None:
    state_in, state_out = var.state_input, var.state_output
    if not state_in or not state_out or var.shape is None or len(var.shape) != 4 or var.length_input:
        return None
    maker = made.get(state_out)
    if maker is None:
        return None
    node = graph.node[maker]
    fused, other = _branch(node, "else_branch"), _branch(node, "then_branch")
    if node.op_type != "If" or fused is None or other is None:
        return None
    position = list(node.output).index(state_out)
    kernel = next((n for n in fused.node if n.op_type == "GroupQueryAttention" and n.domain == "com.microsoft"), None)
    if kernel is None or len(kernel.input) < 7 or any(subgraphs(n) for n in fused.node):
        return None
    past_at = [i for i in _PAST if i < len(kernel.input) and kernel.input[i] == state_in]
    if len(past_at) != 1 or fused.output[position].name != kernel.output[_PAST[past_at[0]]]:
        return None
    if any(state_in in n.input for n in fused.node if n is not kernel):
        return None
    shapes = []
    for index in used.get(state_in, set()):
        reader = graph.node[index]
        if reader.op_type == "Shape" and reader.domain in ("", "ai.onnx"):
            shapes.append(index)
        elif index != maker:
            return None
    return _Plan(var, sorted(shapes), other, kernel.input[6])


def _span(attrs: dict[str, int]) -> list[int]:
    """The dims ``[start, end)`` a ``Shape`` node with ``attrs`` gives of a rank-4 cache."""
    span = []
    for key, default in _SPAN:
        at = attrs.get(key, default)
        span.append(min(max(at + 4 if at < 0 else at, 0), 4))
    return span


def _plans(graph: onnx.GraphProto, meta: ModelMeta) -> dict[str, _Plan]:
    made, used = producers(graph), consumers(graph)
    return {var.id: plan for var in meta.variables if (plan := _plan(graph, var, made, used)) is not None}


def shares_any(model: onnx.ModelProto, meta: ModelMeta) -> bool:
    """Whether :func:`share_kv` would change ``model`` (nothing is changed here)."""
    return bool(_plans(model.graph, meta))


def shares_all(model: onnx.ModelProto, meta: ModelMeta) -> bool:
    """Whether :func:`share_kv` would give every variable of ``model`` its length input."""
    return bool(meta.variables) and len(_plans(model.graph, meta)) == len(meta.variables)


def share_kv(model: onnx.ModelProto, meta: ModelMeta) -> ModelMeta:
    """Give every qualifying variable of explicit ``model`` its length input and output (see the
    module docstring), in place; returns the metadata naming them. Others are left as they are."""
    graph = model.graph
    plans = _plans(graph, meta)
    if not plans:
        return meta
    fresh = namer(graph)

    def const(value: np.ndarray, base: str) -> str:
        return add_initializer(graph, fresh, value, base)

    one = const(np.array([1], np.int64), "ortstate.kv_one")
    axis = const(np.array([_AXIS], np.int64), "ortstate.kv_axis")
    start = const(np.array([0], np.int64), "ortstate.kv_zero")
    added: list[onnx.NodeProto] = []
    replaced: dict[int, onnx.NodeProto] = {}
    variables = []
    for var in meta.variables:
        plan = plans.get(var.id)
        if plan is None:
            variables.append(var)
            continue
        state_in = var.state_input or ""
        length_in, length_out = fresh(length_input_name(var.id)), fresh(length_output_name(var.id))
        graph.input.append(helper.make_tensor_value_info(length_in, onnx.TensorProto.INT64, []))
        graph.output.append(helper.make_tensor_value_info(length_out, onnx.TensorProto.INT64, []))
        length = fresh(f"{length_in}_1d")
        added += [
            helper.make_node("Reshape", [length_in, one], [length], name=fresh(f"{length}_node")),
            helper.make_node("Cast", [plan.total], [length_out], name=fresh(f"{length_out}_node"), to=7),
        ]
        logical = ""  # the whole logical shape, made only for a Shape node that asks for more than its length
        for index in plan.shapes:
            shape = graph.node[index]
            attrs = {a.name: a.i for a in shape.attribute}
            if _span(attrs) == [_AXIS, _AXIS + 1]:  # the length alone (a past length): no shape to build
                replaced[index] = helper.make_node("Identity", [length], list(shape.output), name=shape.name)
                continue
            if not logical:
                lead, tail = fresh(f"{state_in}_lead"), fresh(f"{state_in}_tail")
                logical = fresh(f"{state_in}_shape")
                added += [
                    helper.make_node("Shape", [state_in], [lead], name=fresh(f"{lead}_node"), end=_AXIS),
                    helper.make_node("Shape", [state_in], [tail], name=fresh(f"{tail}_node"), start=_AXIS + 1),
                    helper.make_node("Concat", [lead, length, tail], [logical], name=fresh(f"{logical}_node"), axis=0),
                ]
            bounds = [const(np.array([attrs.get(k, d)], np.int64), f"ortstate.kv_{k}") for k, d in _SPAN]
            replaced[index] = helper.make_node("Slice", [logical, *bounds], list(shape.output), name=shape.name)
        valid = fresh(f"{state_in}_valid")
        rename_reads(plan.branch.node, {state_in: valid})
        plan.branch.node.insert(
            0, helper.make_node("Slice", [state_in, start, length, axis], [valid], name=fresh(f"{valid}_node"))
        )
        variables.append(dataclasses.replace(var, length_input=length_in, length_output=length_out))
    nodes = sorted_nodes([*added, *(replaced.get(i, node) for i, node in enumerate(graph.node))])
    del graph.node[:]
    graph.node.extend(nodes)
    return dataclasses.replace(meta, variables=tuple(variables))

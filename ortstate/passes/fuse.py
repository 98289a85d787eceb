"""Fuse a custom-op model's per-variable ReadValue/Assign nodes into one node per dtype group.

Every state op is a Python call holding the GIL (~5 µs); a model with many variables would pay it
twice per variable per step. The model file keeps one node per variable (the readable form the
converter writes); the session runs it fused: one ``ReadValues{n}`` and one
``AssignValues{n}`` node per group of variables sharing a carrier dtype. Reads are grouped by
level as well: a variable whose init value is computed from another variable's read (T5 keeps
``encoder_hidden_states`` as a state that other inits read) must be read after it.

Each input and output of a Python op is converted by onnxruntime-extensions on every call (a numpy
call each), so reads whose init is a constant of zeros of the variable's init shape (a ReadValue-6
without input, an LSTM's state) go to a ``ReadStates{n}_{dtype}`` node, alone or not, that takes the
request key only: the request's store makes those zeros itself.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..meta import (
    ASSIGN,
    CONTRIB_DOMAIN,
    FUSED_ASSIGN,
    FUSED_READ,
    FUSED_READ_STATES,
    MAX_FUSED,
    READ_VALUE,
    VARIABLE_ID,
    VARIABLE_IDS,
    ModelMeta,
    fused_op,
)
from .build import namer
from .walk import producers, upstream

__all__ = ["fusable", "fuse_state_ops"]


def _state_ops(graph: onnx.GraphProto, op_type: str) -> list[onnx.NodeProto]:
    return [n for n in graph.node if n.domain == CONTRIB_DOMAIN and n.op_type == op_type]


def fusable(model: onnx.ModelProto) -> bool:
    """Whether :func:`fuse_state_ops` may change ``model``: two reads or two writes, or a read whose
    init is a constant of zeros."""
    reads = _state_ops(model.graph, READ_VALUE)
    if len(reads) > 1 or len(_state_ops(model.graph, ASSIGN)) > 1:
        return True
    consts = {t.name: t for t in model.graph.initializer}
    return any(_zeros(consts.get(n.input[0])) is not None for n in reads)


def fuse_state_ops(model: onnx.ModelProto, meta: ModelMeta) -> None:
    """Fuse ``model``'s state ops (custom-op form), in place."""
    carrier = {v.id: v.carrier or v.dtype for v in meta.variables}
    graph = model.graph
    reads, assigns = _state_ops(graph, READ_VALUE), _state_ops(graph, ASSIGN)
    zero = _zero_init_reads(graph, reads, meta)
    if len(reads) < 2 and len(assigns) < 2 and not zero:
        return
    levels = _read_levels(graph, reads)
    read_groups: dict[tuple[int, str, bool], list[onnx.NodeProto]] = defaultdict(list)
    for node in reads:
        read_groups[(levels[node.output[0]], carrier[_variable_id(node)], node.name in zero)].append(node)
    assign_groups: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in assigns:
        assign_groups[carrier[_variable_id(node)]].append(node)

    fresh = namer(graph)
    replaced: set[str] = set()
    new_nodes: list[onnx.NodeProto] = []
    kinds = [(FUSED_READ_STATES if key[2] else FUSED_READ, group) for key, group in read_groups.items()]
    kinds += [(FUSED_ASSIGN, group) for group in assign_groups.values()]
    for kind, group in kinds:
        for chunk in _chunks(group, alone=kind == FUSED_READ_STATES):
            replaced.update(n.name for n in chunk)
            name = fresh(f"ortstate_fused_{len(new_nodes)}")
            outputs = [name] if kind == FUSED_ASSIGN else [n.output[0] for n in chunk]
            values = [] if kind == FUSED_READ_STATES else [n.input[0] for n in chunk]
            dtype = carrier[_variable_id(chunk[0])] if kind == FUSED_READ_STATES else ""
            new_nodes.append(
                helper.make_node(
                    fused_op(kind, len(chunk), dtype),
                    values + [chunk[0].input[1]],  # values (or inits), then the request key
                    outputs,
                    name=name,
                    domain=CONTRIB_DOMAIN,
                    **{VARIABLE_IDS: json.dumps([_variable_id(n) for n in chunk])},
                )
            )
    kept = [n for n in graph.node if n.name not in replaced]
    del graph.node[:]
    # onnxruntime sorts nodes topologically when it loads a graph, so appending is enough.
    graph.node.extend(kept + new_nodes)


def _chunks(group: list[onnx.NodeProto], alone: bool = False) -> list[list[onnx.NodeProto]]:
    out = [group[i : i + MAX_FUSED] for i in range(0, len(group), MAX_FUSED)]
    return [c for c in out if len(c) > 1 or alone]  # a lone node keeps its per-variable op, unless ``alone``


def _zeros(tensor: onnx.TensorProto | None) -> np.ndarray | None:
    """``tensor``'s value if it is held in the model and all zeros (a zero init's constant)."""
    if tensor is None or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    value = numpy_helper.to_array(tensor)
    return value if not value.any() else None


def _zero_init_reads(graph: onnx.GraphProto, reads: list[onnx.NodeProto], meta: ModelMeta) -> set[str]:
    """The reads whose init is a constant equal to what the store makes for an uninitialised
    variable: zeros of its init shape in its carrier dtype (an initializer no feed overrides)."""
    consts = {t.name: t for t in graph.initializer}
    fed = {i.name for i in graph.input}
    variables = {v.id: v for v in meta.variables}
    found = set()
    for node in reads:
        var = variables.get(_variable_id(node))
        value = None if node.input[0] in fed else _zeros(consts.get(node.input[0]))
        if var is None or value is None or var.init_shape is None:
            continue
        if value.dtype == np.dtype(var.carrier or var.dtype) and list(value.shape) == list(var.init_shape):
            found.add(node.name)
    return found


def _variable_id(node: onnx.NodeProto) -> str:
    return next(a.s.decode() for a in node.attribute if a.name == VARIABLE_ID)


def _read_levels(graph: onnx.GraphProto, reads: list[onnx.NodeProto]) -> dict[str, int]:
    """For each read's output: 0, or 1 + the highest level of the reads its init depends on."""
    made_by = producers(graph)
    read_outputs = {n.output[0]: n for n in reads}
    memo: dict[str, frozenset[str]] = {}

    def reads_behind(value: str) -> frozenset[str]:
        """Read outputs ``value`` depends on."""
        if value not in memo:
            found = upstream(graph, [value], stop=read_outputs, made_by=made_by)
            memo[value] = frozenset(name for name in found if name in read_outputs)
        return memo[value]

    levels: dict[str, int] = {}

    def level(out: str) -> int:
        if out not in levels:
            levels[out] = 0  # guards against cycles, which a valid model cannot have
            deps = reads_behind(read_outputs[out].input[0])
            levels[out] = 1 + max((level(d) for d in deps), default=-1)
        return levels[out]

    for out in read_outputs:
        level(out)
    return levels

"""Run a custom-op model in the explicit form: its state ops become graph inputs and outputs.

A custom-op model pays two Python calls per step (the fused ``ReadValues``/``AssignValues``,
holding the GIL); the explicit form pays none and steps through ping-pong IOBindings. Both mean the
same: a ``ReadValue`` gives the variable's value, or its init value on the first run and after a
reset; an ``Assign`` gives the next value. So a session that may choose (``form="auto"``) rewrites
a custom-op model on load, per variable:

- ``ReadValue(init, key)`` → the value of a new graph input ``ortstate.in.<id>`` (carrier dtype),
  or, for a computed init, ``If(ortstate.init.<id>, init, ortstate.in.<id>)``. An init the
  converter already guarded with ``If(flag, init, <empty>)`` gets ``ortstate.in.<id>`` as its else
  branch; an unguarded one (cheap, computed every step in custom-op form too) gets a new flag input.
- ``Assign(value, key)`` → ``Identity(value)`` as a new graph output ``ortstate.out.<id>``.

The request key input goes away. The model file is not changed; a model whose state ops are not as
the converter writes them (one top-level ReadValue and Assign per variable) is left alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper

from ..model_meta import EXPLICIT, ModelMeta, VariableMeta

__all__ = ["to_explicit"]

_DOMAIN = "ai.onnx.contrib"
_STATE_OPS = ("ReadValue", "Assign")


def to_explicit(model: onnx.ModelProto, meta: ModelMeta) -> tuple[onnx.ModelProto, ModelMeta] | None:
    """The explicit-form copy of a custom-op ``model`` and its metadata; None if it can't be made."""
    graph = model.graph
    reads = _by_variable(graph, "ReadValue")
    assigns = _by_variable(graph, "Assign")
    ids = [v.id for v in meta.variables]
    if reads is None or assigns is None or sorted(reads) != sorted(ids) or sorted(assigns) != sorted(ids):
        return None
    if any(_nested_state_ops(node) for node in graph.node):
        return None
    state_nodes = [*reads.values(), *assigns.values()]
    if any(len(n.input) != 2 or len(n.output) < 1 for n in state_nodes):
        return None
    if len({n.name for n in state_nodes}) != len(state_nodes):
        return None  # nodes are replaced by name below

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    taken = _all_names(g)
    producer = {name: node for node in g.node for name in node.output}
    replacements: dict[str, list[onnx.NodeProto]] = {}
    variables: list[VariableMeta] = []
    for var in meta.variables:
        carrier = helper.np_dtype_to_tensor_dtype(np.dtype(var.carrier or var.dtype))
        dims = None
        if var.shape is not None:
            dims = [d if isinstance(d, int) else f"{var.id}_d{i}" for i, d in enumerate(var.shape)]
        state_in = _fresh(taken, f"ortstate.in.{var.id}")
        state_out = _fresh(taken, f"ortstate.out.{var.id}")
        g.input.append(helper.make_tensor_value_info(state_in, carrier, dims))
        g.output.append(helper.make_tensor_value_info(state_out, carrier, dims))

        read, assign = reads[var.id], assigns[var.id]
        init, value = read.input[0], read.output[0]
        flag = var.init_flag
        if var.init == "zeros":
            # The runtime feeds zeros of ``init_shape`` while the variable is uninitialised.
            new_read = [helper.make_node("Identity", [state_in], [value], name=read.name)]
        else:
            guard = producer.get(init)
            if flag and guard is not None and guard.op_type == "If" and guard.input[0] == flag:
                if not _else_reads(guard, _passthrough(taken, f"{read.name}_state", state_in, carrier)):
                    return None
                new_read = [helper.make_node("Identity", [init], [value], name=read.name)]
            else:
                flag = _fresh(taken, f"ortstate.init.{var.id}")
                g.input.append(helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, []))
                then_branch = _passthrough(taken, f"{read.name}_init", init, carrier)
                else_branch = _passthrough(taken, f"{read.name}_state", state_in, carrier)
                new_read = [
                    helper.make_node(
                        "If", [flag], [value], name=read.name, then_branch=then_branch, else_branch=else_branch
                    )
                ]
        replacements[read.name] = new_read
        replacements[assign.name] = [helper.make_node("Identity", [assign.input[0]], [state_out], name=assign.name)]
        variables.append(dataclasses.replace(var, init_flag=flag, state_input=state_in, state_output=state_out))

    nodes = []
    for node in g.node:
        nodes.extend(replacements.get(node.name, [node]) if _is_state_op(node) else [node])
    del g.node[:]
    g.node.extend(nodes)
    key = meta.request_input
    if key and not any(key in n.input for n in g.node):
        kept = [i for i in g.input if i.name != key]
        del g.input[:]
        g.input.extend(kept)
    return out, dataclasses.replace(meta, form=EXPLICIT, request_input=None, variables=tuple(variables))


def _is_state_op(node: onnx.NodeProto) -> bool:
    return node.domain == _DOMAIN and node.op_type in _STATE_OPS


def _by_variable(graph: onnx.GraphProto, op_type: str) -> dict[str, onnx.NodeProto] | None:
    found: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        if node.domain != _DOMAIN or node.op_type != op_type:
            continue
        vid = next((a.s.decode() for a in node.attribute if a.name == "variable_id"), None)
        if vid is None or vid in found or not node.name:
            return None
        found[vid] = node
    return found


def _nested_state_ops(node: onnx.NodeProto) -> bool:
    for attr in node.attribute:
        for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            if any(n.domain == _DOMAIN or _nested_state_ops(n) for n in g.node):
                return True
    return False


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in [*graph.input, *graph.output, *graph.value_info]}
    names.update(t.name for t in graph.initializer)
    stack = [graph]
    while stack:
        for node in stack.pop().node:
            names.update(node.output)
            names.add(node.name)
            for attr in node.attribute:
                stack.extend([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs))
    return names


def _fresh(taken: set[str], name: str) -> str:
    candidate, n = name, 1
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    taken.add(candidate)
    return candidate


def _passthrough(taken: set[str], name: str, value: str, elem_type: int) -> onnx.GraphProto:
    """A branch graph giving the outer-scope ``value``."""
    out = _fresh(taken, f"{name}_out")
    return helper.make_graph(
        [helper.make_node("Identity", [value], [out], name=_fresh(taken, f"{name}_identity"))],
        name,
        [],
        [helper.make_tensor_value_info(out, elem_type, None)],
    )


def _else_reads(guard: onnx.NodeProto, branch: onnx.GraphProto) -> bool:
    """Make ``branch`` the init guard's else branch (an empty placeholder in custom-op form);
    False if the guard has none."""
    for attr in guard.attribute:
        if attr.name == "else_branch" and attr.type == onnx.AttributeProto.GRAPH:
            attr.g.CopyFrom(branch)
            return True
    return False

"""Computed inits behind their variable's init flag: what steady steps need not compute, skipped.

A ``ReadValue(init, key)`` reads ``init`` only on a variable's first run and after a reset. Per
variable with a computed init this pass moves the nodes that compute ``init`` for that read alone
(no other node and no graph output needs what they make; the walk stops at other state ops) into
the then branch of ``If(ortstate.init.<id>, init, <empty>)``, whose output the read takes instead.
The else branch is a placeholder the run never reads in the custom-op form (the variable is
initialised when the flag is off); :func:`~ortstate.passes.to_explicit` puts the state input there.

Both forms use it: the converter guards the inits worth skipping (and those of loop-body
variables, whose flag it made while writing the loop), the explicit form every computed init it
does not feed as zeros.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from ..errors import PassError
from ..meta import (
    CONTRIB_DOMAIN,
    READ_VALUE,
    VARIABLE_ID,
    ModelMeta,
    VariableMeta,
    init_flag_name,
)
from .build import namer
from .walk import consumers, producers, upstream

__all__ = ["guard_inits", "only_for"]

# Given a variable and the nodes only its init needs: whether to put them behind its flag.
Worth = Callable[[VariableMeta, Sequence[onnx.NodeProto]], bool]


def guard_inits(graph: onnx.GraphProto, meta: ModelMeta, worth: Worth) -> ModelMeta:
    """Guard, in place, each computed init that has a flag and is not behind it yet, and each one
    without a flag that ``worth`` chooses (it gets a flag input); returns the metadata with the flags.

    Flag inputs come just before the request key, in the metadata's variable order.

    Raises:
        PassError: a variable with a computed init has no ``ReadValue``, or more than one;
            ``graph`` is not changed.
    """
    made_by, readers = producers(graph), consumers(graph)
    reads = _reads(graph)
    plans: dict[int, tuple[VariableMeta, list[int]]] = {}  # by read: the variable, the nodes to move
    for var in meta.variables:
        if var.init != "computed":
            continue
        read = reads.get(var.id, [])
        if len(read) != 1:
            raise PassError(f"variable '{var.id}': {len(read)} ReadValue nodes, expected one")
        maker = made_by.get(graph.node[read[0]].input[0])
        if var.init_flag is not None and maker is not None and _is_guard(graph.node[maker], var.init_flag):
            continue
        moved = only_for(graph, read[0], made_by, readers)
        if var.init_flag is not None or worth(var, [graph.node[i] for i in moved]):
            plans[read[0]] = (var, moved)
    flags = _apply(graph, plans)
    variables = tuple(dataclasses.replace(v, init_flag=flags.get(v.id, v.init_flag)) for v in meta.variables)
    meta = dataclasses.replace(meta, variables=variables)
    _order_flags(graph, meta)
    return meta


def only_for(
    graph: onnx.GraphProto,
    reader: int,
    made_by: dict[str, int] | None = None,
    readers: dict[str, set[int]] | None = None,
) -> list[int]:
    """Indices, in graph order, of the nodes computing the first input of node ``reader`` for it
    alone: no other node (nor a graph output) needs any of their outputs; state ops stay out.

    Args:
        made_by, readers: :func:`~.walk.producers` and :func:`~.walk.consumers` of ``graph``, when
            the caller has them.
    """
    made_by = producers(graph) if made_by is None else made_by
    readers = consumers(graph) if readers is None else readers
    found = upstream(graph, [graph.node[reader].input[0]], made_by=made_by)
    ancestors = {made_by[name] for name in found if name in made_by}
    outputs = {o.name for o in graph.output}
    only: set[int] = set()
    for index in sorted(ancestors, reverse=True):  # consumers come after producers in a graph
        node = graph.node[index]
        outs = [o for o in node.output if o]
        if node.domain != CONTRIB_DOMAIN and all(
            o not in outputs and readers.get(o, set()) <= only | {reader} for o in outs
        ):
            only.add(index)
    return sorted(only)


def _reads(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """``{variable id: indices of its ReadValue nodes}``."""
    found: dict[str, list[int]] = {}
    for index, node in enumerate(graph.node):
        if (node.domain, node.op_type) == (CONTRIB_DOMAIN, READ_VALUE):
            var_id = next((a.s.decode() for a in node.attribute if a.name == VARIABLE_ID), "")
            found.setdefault(var_id, []).append(index)
    return found


def _is_guard(node: onnx.NodeProto, flag: str) -> bool:
    return (node.domain, node.op_type) == ("", "If") and node.input[0] == flag


def _apply(graph: onnx.GraphProto, plans: dict[int, tuple[VariableMeta, list[int]]]) -> dict[str, str]:
    """Each planned read takes its init from a new ``If`` placed just before it; returns the flags
    made, by variable."""
    if not plans:
        return {}
    fresh = namer(graph)

    flags: dict[str, str] = {}
    guards: dict[int, onnx.NodeProto] = {}
    for read, (var, moved) in plans.items():
        flag = var.init_flag
        if flag is None:
            flag = flags[var.id] = fresh(init_flag_name(var.id))
            graph.input.append(helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, []))
        guards[read] = _guard(graph, var, flag, graph.node[read].input[0], moved, fresh)
        graph.node[read].input[0] = guards[read].output[0]
    gone = {index for _, moved in plans.values() for index in moved}
    rebuilt: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        if index in guards:
            rebuilt.append(guards[index])
        if index not in gone:
            rebuilt.append(node)
    del graph.node[:]
    graph.node.extend(rebuilt)
    return flags


def _guard(
    graph: onnx.GraphProto, var: VariableMeta, flag: str, init: str, moved: list[int], fresh: Callable[[str], str]
) -> onnx.NodeProto:
    """``If(flag, init computed by the moved nodes, <empty>)``."""
    carrier = np.dtype(var.carrier or var.dtype)
    elem = helper.np_dtype_to_tensor_dtype(carrier)
    then_out, else_out = fresh(f"{var.id}_init"), fresh(f"{var.id}_skip")
    then_branch = helper.make_graph(
        [
            *(graph.node[i] for i in moved),
            helper.make_node("Identity", [init], [then_out], name=fresh(f"{var.id}_init_identity")),
        ],
        f"init_{var.id}",
        [],
        [helper.make_tensor_value_info(then_out, elem, None)],
    )
    # A placeholder the run never reads: the variable is initialised when the flag is off.
    empty = onnx.numpy_helper.from_array(np.zeros([0] * max(1, len(var.init_shape)), carrier), fresh(f"{var.id}_empty"))
    else_branch = helper.make_graph(
        [helper.make_node("Identity", [empty.name], [else_out], name=fresh(f"{var.id}_skip_identity"))],
        f"skip_init_{var.id}",
        [],
        [helper.make_tensor_value_info(else_out, elem, None)],
        [empty],
    )
    out = fresh(f"{var.id}_guarded")
    return helper.make_node(
        "If", [flag], [out], name=fresh(f"{var.id}_guard"), then_branch=then_branch, else_branch=else_branch
    )


def _order_flags(graph: onnx.GraphProto, meta: ModelMeta) -> None:
    """Put the flag inputs, in variable order, just before the request key (or last)."""
    flags = [v.init_flag for v in meta.variables if v.init_flag is not None]
    by_name = {i.name: i for i in graph.input}
    others = [i for i in graph.input if i.name not in set(flags)]
    at = next((n for n, i in enumerate(others) if i.name == meta.request_input), len(others))
    ordered = [*others[:at], *(by_name[f] for f in flags if f in by_name), *others[at:]]
    if [i.name for i in ordered] != [i.name for i in graph.input]:
        copies = [onnx.ValueInfoProto() for _ in ordered]
        for copy, info in zip(copies, ordered):
            copy.CopyFrom(info)
        del graph.input[:]
        graph.input.extend(copies)

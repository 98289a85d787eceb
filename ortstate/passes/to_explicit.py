"""The explicit form, made from the custom-op form: the only producer of it.

The converter writes the custom-op form; ``convert(explicit_state=True)`` and a session's
``form="auto"`` both run this pass on it. Both forms mean the same: a ``ReadValue`` gives the
variable's value, or its init value on the first run and after a reset; an ``Assign`` gives the
next value. Per variable:

- ``ReadValue(init, key)`` becomes the value of a new graph input ``ortstate.in.<id>``: directly
  for a zero init (the runtime feeds zeros of ``init_shape`` while the variable is uninitialised),
  else through ``If(ortstate.init.<id>, init, ortstate.in.<id>)``. An init the converter guarded
  with ``If(flag, init, <empty>)`` gets the state input as its else branch; an unguarded one (cheap
  enough to compute every step through the Python ops) is guarded first, by the same pass
  (:func:`~ortstate.passes.guard_inits`: a flag input, the nodes only it needs in the ``If``'s
  then branch), so steady steps skip them.
- ``Assign(value, key)`` makes ``value`` a new graph output ``ortstate.out.<id>``: the node making
  it is renamed to write it there, or, where that cannot be (the value is a graph input or output,
  another variable's value, or written by two Assigns), an ``Identity`` copies it.
- A variable whose init is zeros the runtime can make (``init == "zeros"``, or ``init_dims``) reads
  its state input directly: the runtime feeds that first value.

The request key input goes away, and so does what only the state ops needed. Graph inputs end as
the model's own, then per variable its init flag (if any) and its state input; outputs as the
model's own, then the state outputs, in the metadata's variable order.

The carrier (:attr:`~ortstate.meta.VariableMeta.carrier`) is kept: a variable crosses the
graph boundary as the same dtype in both forms, so f16 and bf16 variables are fed as float32 here
too. That is on purpose. The state store, ``set_state`` and snapshots then hold the same bytes
whichever form runs; the pass is a substitution that needs no type reasoning (an ONNX graph does
not say the type of the value an ``Assign`` casts, and dropping the converter's lossless casts
would need it); and the price, two casts a step per f16 variable, falls on variables no exported
model we know has (optimum-intel keeps KV caches in f32). Explicit models from older ortstate
versions carry an f16 variable as float16; their metadata says so, and the runtime follows it.

Loop-body variables (:mod:`ortstate.convert.loop_state`) need nothing more: the custom-op form
reads them before the loop and writes them after it, in the main graph.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from ..errors import PassError
from ..meta import (
    ASSIGN,
    CONTRIB_DOMAIN,
    EXPLICIT,
    READ_VALUE,
    VARIABLE_ID,
    ModelMeta,
    VariableMeta,
    state_dims,
    state_input_name,
    state_output_name,
)
from .build import NewNames, namer
from .init_guard import guard_inits
from .prune import prune
from .walk import consumers, inner_nodes, nodes, producers, rename_uses

__all__ = ["to_explicit"]


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How one variable is rewritten (node indices into the graph, every computed init guarded)."""

    var: VariableMeta
    read: int
    assign: int
    guard: int | None  # the If(flag, init, <empty>) feeding the read; None: the init is not read


@dataclasses.dataclass
class _Rewrite:
    """What the rewrite makes: nodes in place of others, renames, and the new graph inputs/outputs."""

    fresh: NewNames
    replaced: dict[int, list[onnx.NodeProto]] = dataclasses.field(default_factory=dict)
    renames: dict[str, str] = dataclasses.field(default_factory=dict)
    inputs: list[onnx.ValueInfoProto] = dataclasses.field(default_factory=list)
    outputs: list[onnx.ValueInfoProto] = dataclasses.field(default_factory=list)


def to_explicit(model: onnx.ModelProto, meta: ModelMeta) -> ModelMeta:
    """Rewrite custom-op ``model`` into the explicit form, in place; returns its metadata.

    Raises:
        PassError: the state ops are not laid out as the converter writes them (one top-level
            ``ReadValue`` and ``Assign`` per variable of the metadata, keyed by the request input,
            the ``Assign``'s token unused, a flag guarding each flagged init); ``model`` is not
            changed.
    """
    graph = model.graph
    _check(graph, meta)
    # Every init the runtime does not feed as zeros goes behind a flag, its else branch the state.
    meta = guard_inits(graph, meta, lambda var, _: var.init_dims is None)
    plans = _plan(graph, meta)
    rewrite = _Rewrite(namer(graph))
    variables = [_rewrite_read(graph, plan, rewrite) for plan in plans]
    _rewrite_assigns(graph, plans, variables, rewrite)
    rebuilt = [n for index, node in enumerate(graph.node) for n in rewrite.replaced.get(index, [node])]
    del graph.node[:]
    graph.node.extend(rebuilt)
    rename_uses(graph, rewrite.renames)
    hidden = {meta.request_input, *(v.init_flag for v in meta.variables)}
    kept = [i for i in graph.input if i.name not in hidden]
    del graph.input[:]
    graph.input.extend(kept + rewrite.inputs)
    graph.output.extend(rewrite.outputs)
    prune(graph)
    _drop_unused_domain(model, CONTRIB_DOMAIN)
    return dataclasses.replace(meta, form=EXPLICIT, request_input=None, variables=tuple(variables))


def _check(graph: onnx.GraphProto, meta: ModelMeta) -> None:
    """Refuse state ops not laid out as the converter writes them."""
    reads, assigns = _state_ops(graph, meta)
    used = consumers(graph)
    outputs = {o.name for o in graph.output}
    if meta.request_input and not used.get(meta.request_input, set()) <= {*reads.values(), *assigns.values()}:
        raise PassError(f"the request key '{meta.request_input}' is read by a node other than a state op")
    producer = producers(graph)
    inputs = {i.name for i in graph.input}
    for var in meta.variables:
        token = graph.node[assigns[var.id]].output[0]
        if token in used or token in outputs:
            raise PassError(f"variable '{var.id}': the output of its Assign is used")
        if var.init_flag is None:
            continue
        init = graph.node[reads[var.id]].input[0]
        guard = None if init not in producer else graph.node[producer[init]]
        if guard is None or (guard.domain, guard.op_type) != ("", "If") or guard.input[0] != var.init_flag:
            raise PassError(f"variable '{var.id}': its init flag '{var.init_flag}' does not guard its init")
        if var.init_flag not in inputs or used.get(init) != {reads[var.id]} or init in outputs:
            raise PassError(f"variable '{var.id}': its guarded init is not read by its ReadValue alone")
        _else_branch(guard)


def _state_ops(graph: onnx.GraphProto, meta: ModelMeta) -> tuple[dict[str, int], dict[str, int]]:
    """``({variable id: index of its ReadValue}, {...: of its Assign})``, checked to be one each, at
    the top level, keyed by the request input."""
    reads: dict[str, int] = {}
    assigns: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        if any(inner.domain == CONTRIB_DOMAIN for inner in inner_nodes(node)):
            raise PassError(f"node '{node.name}' holds state ops in a subgraph")
        if node.domain != CONTRIB_DOMAIN:
            continue
        if node.op_type not in (READ_VALUE, ASSIGN):
            raise PassError(f"node '{node.name}': {node.op_type} is not a state op of the custom-op form")
        var_id = next((a.s.decode() for a in node.attribute if a.name == VARIABLE_ID), None)
        table = reads if node.op_type == READ_VALUE else assigns
        if var_id is None or var_id in table:
            raise PassError(f"node '{node.name}': variable {var_id!r} has more than one {node.op_type}")
        if len(node.input) != 2 or len(node.output) != 1 or node.input[1] != meta.request_input:
            raise PassError(f"node '{node.name}': not a {node.op_type}(value, request key) with one output")
        table[var_id] = index
    ids = {v.id for v in meta.variables}
    if set(reads) != ids or set(assigns) != ids:
        odd = sorted(ids.symmetric_difference(reads) | ids.symmetric_difference(assigns))
        raise PassError(f"variable(s) {', '.join(odd)}: not one ReadValue and one Assign each")
    return reads, assigns


def _plan(graph: onnx.GraphProto, meta: ModelMeta) -> list[_Plan]:
    """Each variable's state ops and its init's guard, in the metadata's order."""
    reads, assigns = _state_ops(graph, meta)
    producer = producers(graph)
    plans = []
    for var in meta.variables:
        read = reads[var.id]
        fed = var.init == "zeros" or var.init_dims is not None  # the runtime feeds the first value
        plans.append(_Plan(var, read, assigns[var.id], None if fed else producer[graph.node[read].input[0]]))
    return plans


def _rewrite_read(graph: onnx.GraphProto, plan: _Plan, rewrite: _Rewrite) -> VariableMeta:
    """The ReadValue gives the state input, or, where its guard takes the init, the guard's value
    (the state input in its else branch). Returns the variable's metadata."""
    var, read = plan.var, graph.node[plan.read]
    carrier = helper.np_dtype_to_tensor_dtype(np.dtype(var.carrier or var.dtype))
    dims = state_dims(var.shape, var.id)
    state_in, state_out = rewrite.fresh(state_input_name(var.id)), rewrite.fresh(state_output_name(var.id))
    graph_outputs = {o.name for o in graph.output}
    instead: list[onnx.NodeProto] = []  # what replaces the ReadValue
    if plan.guard is None:
        flag = None
        _alias(read.output[0], state_in, graph_outputs, rewrite.renames, instead, rewrite.fresh)
    else:
        flag = var.init_flag
        guard = graph.node[plan.guard]
        _else_branch(guard).CopyFrom(_passthrough(rewrite.fresh, f"{read.name}_state", state_in, carrier))
        _alias(read.output[0], read.input[0], graph_outputs, rewrite.renames, instead, rewrite.fresh)
        flag_input = onnx.ValueInfoProto()
        flag_input.CopyFrom(next(i for i in graph.input if i.name == flag))
        rewrite.inputs.append(flag_input)
    rewrite.replaced[plan.read] = instead
    rewrite.inputs.append(helper.make_tensor_value_info(state_in, carrier, dims))
    rewrite.outputs.append(helper.make_tensor_value_info(state_out, carrier, dims))
    return dataclasses.replace(var, init_flag=flag, state_input=state_in, state_output=state_out)


def _rewrite_assigns(
    graph: onnx.GraphProto, plans: list[_Plan], variables: list[VariableMeta], rewrite: _Rewrite
) -> None:
    """Each Assign's value becomes its state output: the node making it writes there, or, where
    that cannot be, an Identity copies it."""
    made_by = producers(graph)
    reads = {plan.read for plan in plans}
    graph_outputs = {o.name for o in graph.output}
    counts = Counter(graph.node[plan.assign].input[0] for plan in plans)
    for plan, var in zip(plans, variables):
        assign = graph.node[plan.assign]
        value, state_out = assign.input[0], var.state_output
        assert state_out is not None
        maker = made_by.get(value)
        if maker is None or maker in reads or value in graph_outputs or counts[value] > 1:
            rewrite.replaced[plan.assign] = [helper.make_node("Identity", [value], [state_out], name=assign.name)]
        else:  # the value itself becomes the state output: no copy of it per run
            rewrite.renames[value] = state_out
            rewrite.replaced[plan.assign] = []


def _alias(
    value: str,
    source: str,
    graph_outputs: set[str],
    renames: dict[str, str],
    nodes: list[onnx.NodeProto],
    fresh: Callable[[str], str],
) -> None:
    """Make ``value`` (a removed ReadValue's output) read ``source``: renamed where it is used, or,
    where it is a graph output (whose name stays), an Identity."""
    if value in graph_outputs:
        nodes.append(helper.make_node("Identity", [source], [value], name=fresh(f"{value}_identity")))
    else:
        renames[value] = source


def _passthrough(fresh: Callable[[str], str], name: str, value: str, elem_type: int) -> onnx.GraphProto:
    """A branch graph giving ``value`` of the graph around it."""
    out = fresh(f"{name}_out")
    return helper.make_graph(
        [helper.make_node("Identity", [value], [out], name=fresh(f"{name}_identity"))],
        name,
        [],
        [helper.make_tensor_value_info(out, elem_type, None)],
    )


def _else_branch(guard: onnx.NodeProto) -> onnx.GraphProto:
    """The init guard's else branch (an empty placeholder in the custom-op form)."""
    for attr in guard.attribute:
        if attr.name == "else_branch" and attr.type == onnx.AttributeProto.GRAPH:
            return attr.g
    raise PassError(f"node '{guard.name}': an If without an else branch")


def _drop_unused_domain(model: onnx.ModelProto, domain: str) -> None:
    if any(n.domain == domain for n in nodes(model.graph)):
        return
    kept = [o for o in model.opset_import if o.domain != domain]
    if len(kept) != len(model.opset_import):
        del model.opset_import[:]
        model.opset_import.extend(kept)

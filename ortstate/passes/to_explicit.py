"""The explicit form, made from the custom-op form: the only producer of it.

The converter writes the custom-op form; ``convert(explicit_state=True)`` and a session's
``form="auto"`` both run this pass on it. Both forms mean the same: a ``ReadValue`` gives the
variable's value, or its init value on the first run and after a reset; an ``Assign`` gives the
next value. Per variable:

- ``ReadValue(init, key)`` becomes the value of a new graph input ``ortstate.in.<id>``: directly
  for a zero init (the runtime feeds zeros of ``init_shape`` while the variable is uninitialised),
  else through ``If(ortstate.init.<id>, init, ortstate.in.<id>)``. An init the converter guarded
  with ``If(flag, init, <empty>)`` gets the state input as its else branch; an unguarded one (cheap
  enough to compute every step through the Python ops) gets a flag input and an ``If`` of its own,
  and the nodes only it needs move into that ``If``'s then branch, so steady steps skip them.
- ``Assign(value, key)`` makes ``value`` a new graph output ``ortstate.out.<id>``: the node making
  it is renamed to write it there, or, where that cannot be (the value is a graph input or output,
  another variable's value, or written by two Assigns), an ``Identity`` copies it.
- A variable whose init is zeros the runtime can make (``init == "zeros"``, or ``init_dims``) reads
  its state input directly: the runtime feeds that first value.

The request key input goes away, and so does what only the state ops needed. Graph inputs end as
the model's own, then per variable its init flag (if any) and its state input; outputs as the
model's own, then the state outputs, in the metadata's variable order.

The carrier (:attr:`~ortstate.model_meta.VariableMeta.carrier`) is kept: a variable crosses the
graph boundary as the same dtype in both forms, so f16 and bf16 variables are fed as float32 here
too. That is on purpose. The state store, ``set_state`` and snapshots then hold the same bytes
whichever form runs; the pass is a substitution that needs no type reasoning (an ONNX graph does
not say the type of the value an ``Assign`` casts, and dropping the converter's lossless casts
would need it); and the price, two casts a step per f16 variable, falls on variables no exported
model we know has (optimum-intel keeps KV caches in f32). Explicit models written by ortstate
before this pass carry an f16 variable as float16; their metadata says so and they load as before.

Loop-body variables (:mod:`ortstate.convert.loop_state`) need nothing more: the custom-op form
reads them before the loop and writes them after it, in the main graph.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from ..errors import PassError
from ..model_meta import (
    ASSIGN,
    CONTRIB_DOMAIN,
    EXPLICIT,
    READ_VALUE,
    VARIABLE_ID,
    ModelMeta,
    VariableMeta,
    fresh_name,
    init_flag_name,
    state_dims,
    state_input_name,
    state_output_name,
)
from .prune import prune
from .walk import all_names, consumers, inner_nodes, nodes, outer_reads, producers, rename_uses

__all__ = ["to_explicit"]


@dataclasses.dataclass
class _Plan:
    """How one variable is rewritten (node indices into the graph)."""

    var: VariableMeta
    read: int
    assign: int
    guard: int | None = None  # the converter's If(flag, init, <empty>) feeding the read
    inside: list[int] = dataclasses.field(default_factory=list)  # nodes moving into a new init If


def to_explicit(model: onnx.ModelProto, meta: ModelMeta) -> ModelMeta:
    """Rewrite custom-op ``model`` into the explicit form, in place; returns its metadata.

    Raises:
        PassError: the state ops are not laid out as the converter writes them (one top-level
            ``ReadValue`` and ``Assign`` per variable of the metadata, keyed by the request input,
            the ``Assign``'s token unused, a flag guarding each flagged init); ``model`` is not
            changed.
    """
    graph = model.graph
    plans = _plan(graph, meta)
    taken = all_names(graph)

    def fresh(base: str) -> str:
        name = fresh_name(base, taken)
        taken.add(name)
        return name

    graph_outputs = {o.name for o in graph.output}
    old_inputs = {i.name: i for i in graph.input}
    replaced: dict[int, list[onnx.NodeProto]] = {}
    moved = {i for plan in plans for i in plan.inside}
    renames: dict[str, str] = {}
    written: dict[int, tuple[str, str]] = {}  # Assign index -> (value it writes, state output)
    new_inputs: list[onnx.ValueInfoProto] = []
    new_outputs: list[onnx.ValueInfoProto] = []
    variables: list[VariableMeta] = []
    for plan in plans:
        var = plan.var
        read, assign = graph.node[plan.read], graph.node[plan.assign]
        carrier = helper.np_dtype_to_tensor_dtype(np.dtype(var.carrier or var.dtype))
        dims = state_dims(var.shape, var.id)
        state_in, state_out = fresh(state_input_name(var.id)), fresh(state_output_name(var.id))
        init, value = read.input[0], read.output[0]
        flag = var.init_flag
        instead: list[onnx.NodeProto] = []  # what replaces the ReadValue
        if var.init == "zeros" or var.init_dims is not None:  # the runtime feeds the first value
            flag = None
            _alias(value, state_in, graph_outputs, renames, instead, fresh)
        elif plan.guard is not None:
            guard = graph.node[plan.guard]
            _else_branch(guard).CopyFrom(_passthrough(fresh, f"{read.name}_state", state_in, carrier))
            _alias(value, init, graph_outputs, renames, instead, fresh)
        else:
            flag = fresh(init_flag_name(var.id))
            then_branch = _passthrough(fresh, f"{read.name}_init", init, carrier, [graph.node[i] for i in plan.inside])
            else_branch = _passthrough(fresh, f"{read.name}_state", state_in, carrier)
            instead.append(
                helper.make_node(
                    "If", [flag], [value], name=read.name, then_branch=then_branch, else_branch=else_branch
                )
            )
        replaced[plan.read] = instead
        written[plan.assign] = (assign.input[0], state_out)
        if flag is not None:
            flag_input = onnx.ValueInfoProto()
            if flag in old_inputs:
                flag_input.CopyFrom(old_inputs[flag])
            else:
                flag_input = helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, [])
            new_inputs.append(flag_input)
        new_inputs.append(helper.make_tensor_value_info(state_in, carrier, dims))
        new_outputs.append(helper.make_tensor_value_info(state_out, carrier, dims))
        variables.append(dataclasses.replace(var, init_flag=flag, state_input=state_in, state_output=state_out))

    made_by = producers(graph)
    reads = {plan.read for plan in plans}
    counts = Counter(value for value, _ in written.values())
    for index, (value, state_out) in written.items():
        maker = made_by.get(value)
        if maker is None or maker in reads or maker in moved or value in graph_outputs or counts[value] > 1:
            replaced[index] = [helper.make_node("Identity", [value], [state_out], name=graph.node[index].name)]
        else:  # the value itself becomes the state output: no copy of it per run
            renames[value] = state_out
            replaced[index] = []

    rebuilt: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        if index not in moved:
            rebuilt.extend(replaced.get(index, [node]))
    del graph.node[:]
    graph.node.extend(rebuilt)
    rename_uses(graph, renames)
    hidden = {meta.request_input, *(v.init_flag for v in meta.variables)}
    kept = [i for i in graph.input if i.name not in hidden]
    del graph.input[:]
    graph.input.extend(kept + new_inputs)
    graph.output.extend(new_outputs)
    prune(graph)
    _drop_unused_domain(model, CONTRIB_DOMAIN)
    return dataclasses.replace(meta, form=EXPLICIT, request_input=None, variables=tuple(variables))


def _plan(graph: onnx.GraphProto, meta: ModelMeta) -> list[_Plan]:
    """Each variable's state ops and init, checked to be as the converter writes them."""
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
    used = consumers(graph)
    outputs = {o.name for o in graph.output}
    if meta.request_input and not used.get(meta.request_input, set()) <= {*reads.values(), *assigns.values()}:
        raise PassError(f"the request key '{meta.request_input}' is read by a node other than a state op")
    producer = producers(graph)
    inputs = {i.name for i in graph.input}
    plans = []
    for var in meta.variables:
        plan = _Plan(var, reads[var.id], assigns[var.id])
        token = graph.node[plan.assign].output[0]
        if token in used or token in outputs:
            raise PassError(f"variable '{var.id}': the output of its Assign is used")
        init = graph.node[plan.read].input[0]
        if var.init_flag is not None:
            plan.guard = producer.get(init)
            guard = None if plan.guard is None else graph.node[plan.guard]
            if guard is None or (guard.domain, guard.op_type) != ("", "If") or guard.input[0] != var.init_flag:
                raise PassError(f"variable '{var.id}': its init flag '{var.init_flag}' does not guard its init")
            if var.init_flag not in inputs or used.get(init) != {plan.read} or init in outputs:
                raise PassError(f"variable '{var.id}': its guarded init is not read by its ReadValue alone")
            _else_branch(guard)
        elif var.init != "zeros" and var.init_dims is None:
            plan.inside = _only_for(graph, init, plan.read, producer, used)
        plans.append(plan)
    return plans


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


def _only_for(
    graph: onnx.GraphProto, value: str, reader: int, producer: dict[str, int], readers: dict[str, set[int]]
) -> list[int]:
    """Indices, in graph order, of the nodes that compute ``value`` for node ``reader`` alone: no
    other node (nor a graph output) needs any of their outputs."""
    ancestors: set[int] = set()
    stack = [value]
    while stack:
        index = producer.get(stack.pop())
        if index is None or index in ancestors:
            continue
        ancestors.add(index)
        node = graph.node[index]
        stack.extend([*node.input, *outer_reads(node)])
    outputs = {o.name for o in graph.output}
    only: set[int] = set()
    for index in sorted(ancestors, reverse=True):  # consumers come after producers in a graph
        outs = [o for o in graph.node[index].output if o]
        if all(o not in outputs and readers.get(o, set()) <= only | {reader} for o in outs):
            only.add(index)
    return sorted(only)


def _passthrough(
    fresh: Callable[[str], str], name: str, value: str, elem_type: int, before: Sequence[onnx.NodeProto] = ()
) -> onnx.GraphProto:
    """A branch graph giving ``value`` (of the graph around it, or made by the ``before`` nodes)."""
    out = fresh(f"{name}_out")
    return helper.make_graph(
        [*before, helper.make_node("Identity", [value], [out], name=fresh(f"{name}_identity"))],
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

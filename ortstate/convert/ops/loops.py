"""TensorIterator-1 and Loop-5 as ONNX ``Loop``.

OpenVINO runs the ``body`` once per iteration. The ``port_map`` wires the layer's input ports to body
Parameters: *sliced* (an ``axis`` is given: one chunk per iteration, see :mod:`.loop_slicing`),
*merged* (a back edge feeds the Parameter from a body Result on the next iteration; the input port
is only the first value) or *invariant* (the same value every iteration). Output ports are the
last iteration's value of a body Result, or the values of all iterations concatenated along an
``axis``. Loop-5 adds a trip count (input 0, ``-1`` = unbounded) and an execution condition (input 1);
its port map marks the body Parameter receiving the iteration number (``purpose="current_iteration"``)
and the body Result deciding whether to go on (``purpose="execution_condition"``).

ONNX ``Loop(M, cond, carried...)`` runs a body with inputs ``(iteration_num, cond, carried...)`` and
outputs ``(cond, carried..., scans...)``; it returns the last carried values and the scans stacked
on a new axis 0. Merged inputs become carried values; a last-iteration output of a Result no back
edge reads gets a carried slot of its own (starting as an empty tensor); concatenated outputs are
scans merged into their axis after the loop. Invariant and sliced inputs are read from the outer
scope; a sliced input is sliced inside the body by the iteration number. TensorIterator's trip count
is the number of chunks of its sliced inputs (computed at run time when the axis is dynamic).
Variables read and assigned in the body are carried values too (see :mod:`..loop_state`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto

from ...ir import ElementType, Graph, Layer, parse_partial_shape
from ...meta import shown_id
from ..builder import GraphBuilder
from ..context import Context, Node
from ..dtypes import numpy_type, onnx_type
from ..loop_slicing import Int, SliceRule, concat_iterations, dim_of, int64_scalar, slice_in_body
from ..loop_state import BodyScope, body_variables
from ..registry import translator
from ..translate import translate_body

__all__ = ["loop_v5", "tensor_iterator_v1"]

_INT64_MAX = np.iinfo(np.int64).max


@dataclass
class _Plan:
    """The port map and back edges of one layer, resolved to input indices and body layer ids."""

    sliced: list[tuple[int, int, SliceRule]] = field(default_factory=list)  # (input index, param id, rule)
    merged: list[tuple[int, int, int]] = field(default_factory=list)  # (input index, param id, result id)
    invariant: list[tuple[int, int]] = field(default_factory=list)  # (input index, param id)
    outputs: list[tuple[int, SliceRule | None]] = field(default_factory=list)  # per output port: (result id, rule)
    current_iteration: int | None = None  # Loop: the body Parameter given the iteration number
    condition: int | None = None  # Loop: the body Result deciding whether to continue


def _plan(node: Node, first_data_input: int) -> _Plan:
    layer, body = node.layer, _body(node)
    in_index = {p.id: i for i, p in enumerate(layer.inputs)}
    out_index = {p.id: i for i, p in enumerate(layer.outputs)}
    back = {e.to_layer: e.from_layer for e in layer.back_edges}
    plan = _Plan()
    outputs: dict[int, tuple[int, SliceRule | None]] = {}
    for entry in layer.port_map:
        try:
            port, body_id = int(entry["external_port_id"]), int(entry["internal_layer_id"])
        except (KeyError, ValueError):
            message = f"port_map entry {dict(entry)}: expected integer external_port_id and internal_layer_id"
            raise node.error(message) from None
        kind, purpose = entry.get("kind"), entry.get("purpose", "")
        expected = "Parameter" if kind == "input" else "Result"
        if body_id not in body.layers or body.layers[body_id].type != expected:
            raise node.error(f"port_map entry {dict(entry)}: body layer {body_id} is not a {expected}")
        if purpose == "current_iteration":
            plan.current_iteration = body_id
        elif purpose == "execution_condition":
            plan.condition = body_id
        elif kind == "input":
            if port not in in_index or in_index[port] < first_data_input:
                raise node.error(f"port_map input {dict(entry)}: no data input port {port}")
            index, rule = in_index[port], SliceRule.parse(entry, node.where)
            if rule is not None:
                rule.check_input(node.where)
                plan.sliced.append((index, body_id, rule))
            elif body_id in back:
                plan.merged.append((index, body_id, back[body_id]))
            else:
                plan.invariant.append((index, body_id))
        elif kind == "output":
            if port not in out_index:
                raise node.error(f"port_map output {dict(entry)}: no output port {port}")
            outputs[out_index[port]] = (body_id, SliceRule.parse(entry, node.where))
    missing = [p.id for i, p in enumerate(layer.outputs) if i not in outputs]
    if missing:
        raise node.error(f"output ports {missing} are not in the port_map")
    plan.outputs = [outputs[i] for i in range(len(layer.outputs))]
    fed = {param for _, param, _ in plan.sliced} | {param for _, param, _ in plan.merged}
    for param, result in back.items():
        if param not in fed and param != plan.current_iteration:
            raise node.error(f"back edge {result} -> {param}: body Parameter {param} has no initial value in port_map")
    return plan


def _body(node: Node) -> Graph:
    if node.layer.body is None:
        raise node.error("has no body")
    return node.layer.body


def _result_type(body: Graph, result: Layer) -> ElementType | None:
    return result.inputs[0].element_type or body.producer(result, 0)[1].element_type


def _result_onnx_type(node: Node, result: Layer) -> int:
    return onnx_type(_result_type(_body(node), result), f"{node.where}: body {result.describe()}")


def _slice_counts(node: Node, ctx: Context, plan: _Plan) -> tuple[Int | None, dict[int, Int]]:
    """Iterations given by the sliced inputs (None without any) and each sliced Parameter's offset."""
    count: Int | None = None
    offsets: dict[int, Int] = {}
    for index, param, rule in plan.sliced:
        axis = rule.axis + node.input_rank(index) if rule.axis < 0 else rule.axis
        dims = node.input_shape(index).dims or ()
        known = dims[axis].lo if axis < len(dims) and dims[axis].is_static else None
        n, offsets[param] = rule.bounds(ctx.b, dim_of(ctx.b, node.inputs[index], axis, known), node.where)
        count = n if count is None else count  # OpenVINO requires every sliced input to agree
    return count, offsets


def _emit(node: Node, ctx: Context, plan: _Plan, trip: str, cond: str, offsets: dict[int, Int]) -> list[str]:
    """Write the ONNX Loop; ``trip``/``cond`` are its M and cond inputs (names, "" for none)."""
    layer, body, b = node.layer, _body(node), ctx.b
    loop_body, initial, carried, variables, scans = _write_body(node, ctx, plan, offsets)
    if not carried and not variables and not scans:
        return []
    count = len(carried) + len(variables) + len(scans)
    outs = b.op("Loop", [trip, cond, *initial], {"body": loop_body}, outputs=count)
    outs = [outs] if isinstance(outs, str) else outs
    finals = dict(zip(carried, outs))
    for var_id, last in zip(variables, outs[len(carried) :]):
        ctx.scope.write(var_id, last)  # type: ignore[union-attr]  # _write_body checked it
    stacked = dict(zip(scans, outs[len(carried) + len(variables) :]))
    values: list[str] = []
    for port, (result, rule) in zip(layer.outputs, plan.outputs):
        if rule is None:
            values.append(finals[result])
            continue
        shape = body.layers[result].inputs[0].shape
        rank: int | None = len(shape.dims or ())
        if rank == 0:  # no dims: a scalar, or a dynamic rank; the output port tells them apart
            rank = 0 if len(port.shape.dims or ()) == 1 else None
        static = shape.to_list() if shape.is_static and rank is not None else None
        values.append(concat_iterations(b, stacked[result], rule, rank, node.where, static))
    return values


def _write_body(
    node: Node, ctx: Context, plan: _Plan, offsets: dict[int, Int]
) -> tuple[onnx.GraphProto, list[str], list[int], list[str], list[int]]:
    """The ONNX body, the carried values' initial values, the body Result ids that are carried, the
    variables carried after them, and the body Result ids scanned (in ONNX output order)."""
    layer, body, b = node.layer, _body(node), ctx.b
    sub = b.sub(f"{layer.name}/body")
    iteration, cond_in = b.names.fresh(f"{layer.name}/iteration"), b.names.fresh(f"{layer.name}/cond")
    sub.add_input(iteration, TensorProto.INT64, [])
    sub.add_input(cond_in, TensorProto.BOOL, [])
    params, initial, carried = _carried_inputs(node, ctx, plan, sub)
    variables = body_variables(body)
    scope = None
    if variables:
        if ctx.scope is None:
            raise node.error("the body reads variables, but this graph has no variable scope")
        scope = BodyScope(ctx.scope, sub, iteration)
        for var_id in variables:
            scope.carry(var_id)
            initial.append(ctx.scope.value(var_id))
    for index, param in plan.invariant:
        params[param] = node.inputs[index]
    for index, param, rule in plan.sliced:
        axis = rule.axis + node.input_rank(index) if rule.axis < 0 else rule.axis
        params[param] = slice_in_body(sub, node.inputs[index], rule, axis, offsets[param], iteration)
    if plan.current_iteration is not None:
        params[plan.current_iteration] = _iteration_value(sub, body.layers[plan.current_iteration], iteration)
    values = translate_body(body, sub, params, scope, ctx.options)
    scans = _write_outputs(node, plan, sub, values, cond_in, carried, variables, scope)
    return sub.graph(), initial, carried, variables, scans


def _carried_inputs(
    node: Node, ctx: Context, plan: _Plan, sub: GraphBuilder
) -> tuple[dict[int, str], list[str], list[int]]:
    """The body's carried inputs (the merged Parameters, then a slot for each concatenated-last
    Result not merged): the Parameters' values in the body, the carried initial values, and the body
    Result ids carried."""
    body, b = _body(node), ctx.b
    params: dict[int, str] = {}
    initial: list[str] = []
    carried: list[int] = []
    for index, param, result in plan.merged:
        params[param] = b.names.fresh(f"{body.layers[param].name}/carried")
        sub.add_input(params[param], node.onnx_input_type(index), None)
        initial.append(node.inputs[index])
        carried.append(result)
    for result, rule in plan.outputs:
        if rule is None and result not in carried:
            res = body.layers[result]
            elem = _result_onnx_type(node, res)
            sub.add_input(b.names.fresh(f"{res.name}/slot"), elem, None)
            empty = np.zeros([0] * len(res.inputs[0].shape.dims or ()), numpy_type(elem))
            initial.append(b.const(empty, hint=f"{res.name}/empty"))
            carried.append(result)
    return params, initial, carried


def _write_outputs(
    node: Node,
    plan: _Plan,
    sub: GraphBuilder,
    values: dict[int, str],
    cond_in: str,
    carried: list[int],
    variables: list[str],
    scope: BodyScope | None,
) -> list[int]:
    """The body's outputs in ONNX order (condition, carried Results, variables, scanned Results);
    the body Result ids scanned."""
    body = _body(node)
    produced = {out for n in sub.nodes for out in n.output}
    used: set[str] = set()

    def own(value: str) -> str:
        """A body output must be produced inside the body, and listed once."""
        if value not in produced or value in used:
            value = sub.op("Identity", [value])
        used.add(value)
        return value

    if plan.condition is not None:
        etype = _result_type(body, body.layers[plan.condition])
        value = values[plan.condition]
        if etype is None or etype.name != "boolean":
            value = sub.op("Cast", [value], {"to": TensorProto.BOOL})
        cond_out = own(sub.op("Reshape", [value, sub.const(np.array([], np.int64))]))
    else:
        cond_out = own(cond_in)
    sub.add_output(cond_out, TensorProto.BOOL, [])
    scans = [result for result, rule in plan.outputs if rule is not None]
    for result in carried:
        sub.add_output(own(values[result]), _result_onnx_type(node, body.layers[result]), None)
    for var_id in variables:
        assert scope is not None
        if var_id not in scope.end:
            raise node.error(f"variable {shown_id(var_id)} is read in the body but not assigned there")
        sub.add_output(own(scope.end[var_id]), onnx_type(scope.variable(var_id).etype), None)
    for result in scans:
        sub.add_output(own(values[result]), _result_onnx_type(node, body.layers[result]), None)
    return scans


def _iteration_value(sub: GraphBuilder, param: Layer, iteration: str) -> str:
    """The iteration number as the current_iteration Parameter wants it (i32/i64, scalar or [1])."""
    etype = param.outputs[0].element_type
    value = iteration
    if etype is not None and etype.name != "i64":
        value = sub.op("Cast", [value], {"to": onnx_type(etype, param.describe())})
    rank = parse_partial_shape(param.attrs.get("shape", "")).rank
    if rank != 0:
        value = sub.op("Unsqueeze", [value, sub.const(np.array([0], np.int64))])
    return value


@translator("TensorIterator", 1)
def tensor_iterator_v1(node: Node, ctx: Context) -> list[str]:
    """TensorIterator-1 -> Loop with a trip count (the number of chunks of the sliced inputs, else the
    concatenated outputs' length as the IR states it, else 1) and a constant-true condition."""
    plan = _plan(node, 0)
    count, offsets = _slice_counts(node, ctx, plan)
    if count is None:
        count = 1
        for i, (_, rule) in enumerate(plan.outputs):
            dims = node.layer.outputs[i].shape.dims or ()
            if rule is not None and 0 <= rule.axis < len(dims) and dims[rule.axis].is_static:
                count = rule.bounds(ctx.b, dims[rule.axis].lo, node.where)[0]
                break
    trip = count if isinstance(count, str) else ctx.b.const(np.array(count, np.int64))
    return _emit(node, ctx, plan, trip, ctx.b.const(np.array(True)), offsets)


@translator("Loop", 5)
def loop_v5(node: Node, ctx: Context) -> list[str]:
    """Loop-5 -> Loop. A negative trip count means no limit (ONNX: INT64_MAX); with sliced inputs the
    trip count is capped at their number of chunks (OpenVINO fails beyond it). Trip count and
    conditions may be scalars or 1-element tensors of any integer/boolean type (ONNX: scalars)."""
    if len(node.inputs) < 2:
        raise node.error(f"expected trip count and execution condition inputs, got {len(node.inputs)} inputs")
    plan = _plan(node, 2)
    b = ctx.b
    known_trip = node.const(0)
    if known_trip is not None:
        value = int(np.asarray(known_trip).reshape(-1)[0])
        trip = "" if value < 0 else b.const(np.array(value, np.int64))
    else:
        trip = int64_scalar(b, node.inputs[0], node.input_type(0).name)
        zero = b.const(np.array(0, np.int64))
        trip = b.op("Where", [b.op("Less", [trip, zero]), b.const(np.array(_INT64_MAX, np.int64)), trip])
    count, offsets = _slice_counts(node, ctx, plan)
    if count is not None:
        chunks = count if isinstance(count, str) else b.const(np.array(count, np.int64))
        trip = chunks if not trip else b.op("Min", [trip, chunks])
    known_cond = node.const(1)
    if known_cond is not None:
        cond = b.const(np.array(bool(np.asarray(known_cond).reshape(-1)[0])))
    else:
        cond = node.inputs[1]
        if node.input_type(1).name != "boolean":
            cond = b.op("Cast", [cond], {"to": TensorProto.BOOL})
        cond = b.op("Reshape", [cond, b.const(np.array([], np.int64))])
    return _emit(node, ctx, plan, trip, cond, offsets)

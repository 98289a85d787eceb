"""ReadValue/Assign: pair and validate variables, plan their init subgraphs, write their ONNX form.

The converter writes the custom-op form only: ``ReadValue(init, request) -> value`` and
``Assign(value, request)`` in the contrib domain (names: :mod:`ortstate.model_meta`); the
runtime's Python ops read committed values and stage writes. The explicit form is made from it by
:func:`ortstate.passes.to_explicit`.

A computed init is guarded by ``If(init_flag)`` when it is worth skipping (an expensive one, or
one computed in a loop body); the runtime sets the flag only on a variable's first run and after a
reset.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from onnx import TensorProto

from ..errors import StateError
from ..ir import ElementType, Graph, Layer, PartialShape, element_type, parse_partial_shape
from ..model_meta import (
    ASSIGN,
    CONTRIB_DOMAIN,
    MAX_INIT_BYTES,
    MAX_STATE_ELEMENTS,
    READ_VALUE,
    REQUEST_INPUT,
    VARIABLE_ID,
    VariableMeta,
    init_flag_name,
    spanned_elements,
)
from .builder import GraphBuilder
from .dtypes import numpy_type, onnx_type
from .folding import constant_value
from .init_dims import InitDim, zeros_from_input_dims
from .uninitialised import uninitialised_shape

__all__ = ["StateWriter", "Variable", "collect_variables", "plan_inits"]
# Init-only layers of these types are cheap enough to run every step instead of paying for an If.
_CHEAP_INIT_OPS = frozenset(
    "Const Convert ShapeOf Gather Concat Broadcast Reshape Squeeze Unsqueeze Slice StridedSlice Range".split()
)
# PyOps cannot carry f16/bf16 (the process aborts): such variables cross the boundary as f32.
_CARRIED_AS_F32 = frozenset({"f16", "bf16"})
_MAIN = "<main>"


@dataclass
class Variable:
    id: str
    read: Layer
    assign: Layer
    etype: ElementType
    shape: PartialShape
    init: str  # "zeros" | "computed"
    init_shape: tuple[int, ...]  # the zero init's (what the first run reads of a zero init)
    uninit_shape: tuple[int, ...]  # what query_state shows while uninitialised (see .uninitialised)
    exclusive: set[int] = field(default_factory=set)  # layers only this variable's init needs
    guarded: bool = False
    # The ReadValue's input depends on the same variable's Assign: it runs after the write, and reads
    # the value written (OpenVINO's reference implementation runs ops in order; its CPU plugin
    # refuses such a model as a cycle).
    after_assign: bool = False
    body: Graph | None = None  # the loop body holding the ReadValue and Assign; None: the main graph
    init_dims: list[InitDim] | None = None  # a computed init that is zeros of input dims (see .init_dims)

    @property
    def carrier_type(self) -> int:
        return TensorProto.FLOAT if self.etype.name in _CARRIED_AS_F32 else onnx_type(self.etype)


def _where(graph: Graph, layer: Layer) -> str:
    return f"{graph.source}: {layer.describe()}"


def _lenient_relaxes(declared: PartialShape, actual: PartialShape) -> bool:
    """Like ``declared.relaxes(actual)``, reading IR port dims of -1 as unknown (ports lose ranges)."""
    if declared.dims is None or actual.dims is None or not actual.dims:
        return True
    if len(declared.dims) != len(actual.dims):
        return False
    return all(a.relaxes(b) or not b.is_static for a, b in zip(declared.dims, actual.dims))


def _types_of_value(graph: Graph, layer: Layer, index: int) -> list[ElementType]:
    """The element types the IR gives the value on ``layer``'s input ``index``: the producer's output
    port first (the value's real type), then the input port's own precision, where they are written."""
    types = [graph.producer(layer, index)[1].element_type, layer.inputs[index].element_type]
    return [t for t in types if t is not None]


def _depends_on(graph: Graph, layer: Layer, ancestor: Layer) -> bool:
    """True if ``layer``'s inputs are computed from ``ancestor``'s outputs."""
    stack, seen = [layer], {layer.id}
    while stack:
        current = stack.pop()
        for index in range(len(current.inputs)):
            src = graph.producer(current, index)[0]
            if src.id == ancestor.id:
                return True
            if src.id not in seen:
                seen.add(src.id)
                stack.append(src)
    return False


def _shape_of_value(graph: Graph, layer: Layer, index: int) -> PartialShape:
    """The best shape we know for the value on ``layer``'s input ``index``."""
    producer, port = graph.producer(layer, index)
    if producer.type == "Const":
        return PartialShape(tuple(parse_partial_shape(str(d)).dims[0] for d in graph.constant(producer).shape))  # type: ignore[index]
    if producer.type == "Parameter":
        return parse_partial_shape(producer.attrs.get("shape", "..."))
    return port.shape if port.shape.dims else PartialShape(None)


def collect_variables(graph: Graph) -> list[Variable]:
    """Pair every ReadValue with its Assign, in the graph and in loop bodies, and check them the way
    OpenVINO's spec does.

    Raises:
        StateError: naming the variable and layer: a ReadValue without Assign or the reverse, two
            of either for one variable, a ReadValue and its Assign in different graphs (a loop body
            and the graph around it), or a type/shape the variable does not admit.
    """
    reads: dict[str, tuple[Graph, Layer, str]] = {}
    assigns: dict[str, tuple[Graph, Layer, str]] = {}
    for g, layer, where in _state_layers(graph, graph.source):
        vid = layer.attrs.get("variable_id", "")
        if not vid:
            raise StateError(f"{where}: missing attribute 'variable_id'")
        table = reads if layer.type == "ReadValue" else assigns
        if vid in table:
            first = table[vid][1]
            raise StateError(
                f"{where}: variable '{vid}' has two {layer.type} layers "
                f"('{first.name}' id {first.id} and '{layer.name}' id {layer.id})"
            )
        table[vid] = (g, layer, where)
    for vid, (_, _, where) in assigns.items():
        if vid not in reads:
            raise StateError(f"{where}: variable '{vid}' is assigned but never read (no ReadValue)")
    variables = []
    for vid, (g, read, where) in reads.items():
        if vid not in assigns:
            raise StateError(f"{where}: variable '{vid}' is read but never assigned (no Assign)")
        assign_graph, assign, assign_where = assigns[vid]
        if assign_graph is not g:
            raise StateError(
                f"{where}: variable '{vid}' is assigned by {assign_where.split(': ', 1)[1]}: a ReadValue and "
                "its Assign in different graphs (a loop body and the graph around it) are not supported"
            )
        variables.append(replace(_make_variable(g, vid, read, assign), body=None if g is graph else g))
    return variables


def _state_layers(graph: Graph, source: str, inside: str = "") -> list[tuple[Graph, Layer, str]]:
    """(graph, layer, where) for every ReadValue and Assign, loop bodies included, in graph order."""
    found = []
    for layer in graph.topological():
        if layer.type in ("ReadValue", "Assign"):
            found.append((graph, layer, f"{source}: {layer.describe()}{inside}"))
        if layer.body is not None:
            found.extend(_state_layers(layer.body, source, f" in the body of {layer.describe()}{inside}"))
    return found


def _make_variable(graph: Graph, vid: str, read: Layer, assign: Layer) -> Variable:
    where = f"{_where(graph, read)}: variable '{vid}'"
    has_init = bool(read.inputs)
    init_type = None
    init_shape = PartialShape(None)
    if has_init:
        init_type = next(iter(_types_of_value(graph, read, 0)), None)
        init_shape = _shape_of_value(graph, read, 0)
    declared_type: ElementType | None = None
    declared_shape = PartialShape(None)
    if read.op_version is not None and read.op_version >= 6:
        raw_type = read.attrs.get("variable_type", "dynamic")
        if raw_type not in ("dynamic", "undefined"):
            try:
                declared_type = element_type(raw_type)
            except KeyError:
                raise StateError(f"{where}: unknown variable_type {raw_type!r}") from None
        try:
            declared_shape = parse_partial_shape(read.attrs.get("variable_shape", "..."))
        except ValueError as exc:
            raise StateError(f"{where}: bad variable_shape: {exc}") from None
        if not has_init and (declared_type is None or declared_shape.dims is None):
            raise StateError(
                f"{where}: a ReadValue without init input needs a static variable_type and a variable_shape rank"
            )
    elif not has_init:
        raise StateError(f"{where}: ReadValue-3 needs an init input")
    if declared_type is not None and init_type is not None and declared_type != init_type:
        raise StateError(
            f"{where}: variable_type {declared_type.name} does not relax the init value's type {init_type.name}"
        )
    if not _lenient_relaxes(declared_shape, init_shape):
        raise StateError(f"{where}: variable_shape {declared_shape} does not relax the init value's shape {init_shape}")
    etype = declared_type or init_type or read.outputs[0].element_type
    if etype is None:
        raise StateError(f"{where}: cannot tell the variable's element type")
    shape = declared_shape if declared_shape.dims is not None else init_shape

    assign_where = f"{_where(graph, assign)}: variable '{vid}'"
    for assign_type in _types_of_value(graph, assign, 0):
        if assign_type != etype:
            raise StateError(f"{assign_where}: Assign writes {assign_type.name} but the variable is {etype.name}")
    if not _lenient_relaxes(shape, _shape_of_value(graph, assign, 0)):
        raise StateError(
            f"{assign_where}: Assign writes shape {_shape_of_value(graph, assign, 0)} but the variable is {shape}"
        )

    # A zero init runs with the init's shape where the IR tells it without running, else with each
    # dynamic dim of the variable at its lower bound (0 if unbounded); a zero init without input is
    # exactly that. What query_state shows meanwhile follows OpenVINO (see .uninitialised).
    init_kind, zero_shape = "computed", tuple(d.lo for d in shape.dims or ())
    if not has_init:
        init_kind = "zeros"
    else:
        if init_shape.is_static:
            zero_shape = tuple(d.lo for d in init_shape.dims or ())
        value = constant_value(graph, graph.producer(read, 0)[0])
        if value is not None and not np.any(value):
            init_kind, zero_shape = "zeros", tuple(value.shape)
    after_assign = has_init and _depends_on(graph, read, assign)
    shown = uninitialised_shape(graph, read, shape, init_shape)
    variable = Variable(vid, read, assign, etype, shape, init_kind, zero_shape, shown, after_assign=after_assign)
    if init_kind == "computed" and not after_assign:
        variable.init_dims = zeros_from_input_dims(graph, read)
    _check_size(variable, where)
    return variable


def _check_size(var: Variable, where: str) -> None:
    """Refuse a variable no run could hold: its zero initial value is made before the first run (and
    stored in a custom-op model), and dims past :data:`MAX_STATE_ELEMENTS` cannot cross the runtime."""
    lows = [d.lo for d in var.shape.dims or ()]
    if max(spanned_elements(s) for s in (lows, var.init_shape, var.uninit_shape)) > MAX_STATE_ELEMENTS:
        raise StateError(f"{where}: shape {var.shape} spans more than {MAX_STATE_ELEMENTS} elements")
    size = math.prod(var.init_shape) * np.dtype(numpy_type(var.carrier_type)).itemsize
    if size > MAX_INIT_BYTES:
        raise StateError(
            f"{where}: its initial value {list(var.init_shape)} takes {size} bytes, the limit is {MAX_INIT_BYTES}"
        )


def plan_inits(graph: Graph, variables: list[Variable]) -> None:
    """Find each computed init's exclusive layers and decide which inits an ``If`` guards."""
    by_read = {v.read.id: v for v in variables if v.body is None}
    owner: dict[int, str] = {}
    for layer in reversed(graph.topological()):
        if layer.type in ("Parameter", "ReadValue", "Assign", "Result"):
            owner[layer.id] = _MAIN
            continue
        owners = set()
        for index in range(len(layer.outputs)):
            for dst, _ in graph.consumers(layer, index):
                owners.add(by_read[dst.id].id if dst.id in by_read else owner[dst.id])
        owner[layer.id] = owners.pop() if len(owners) == 1 else _MAIN
    for var in variables:
        if var.init != "computed":
            continue
        if var.body is not None:  # computed inside its loop body (see .loop_state), when the flag says so
            var.guarded = True
            continue
        var.exclusive = {lid for lid, o in owner.items() if o == var.id}
        expensive = any(graph.layers[lid].type not in _CHEAP_INIT_OPS for lid in var.exclusive)
        var.guarded = expensive


TranslateFn = Callable[[list[Layer], GraphBuilder], None]
ValueFn = Callable[[Layer, int], str]


class StateWriter:
    """Writes the ONNX form of every variable into the main graph as the driver reaches it."""

    def __init__(self, graph: Graph, variables: list[Variable], builder: GraphBuilder) -> None:
        self.graph = graph
        self.variables = {v.id: v for v in variables}
        self.b = builder
        self.meta: dict[str, VariableMeta] = {}
        self._flags: dict[str, str] = {}
        self._written: dict[str, str] = {}  # the value each Assign wrote, by variable
        # The model's own names were reserved first: these get a suffix where one is taken.
        for var in variables:
            if var.guarded:
                self._flags[var.id] = builder.names.fresh(init_flag_name(var.id))
                builder.add_input(self._flags[var.id], TensorProto.BOOL, [])
        self.request_input: str | None = None
        if variables:
            self.request_input = builder.names.fresh(REQUEST_INPUT)
            builder.add_input(self.request_input, TensorProto.INT64, [])

    def skipped_layers(self) -> set[int]:
        """Layers the driver must not translate in the main graph (they go into If branches)."""
        return {lid for v in self.variables.values() if v.guarded for lid in v.exclusive}

    def read(self, layer: Layer, value_of: ValueFn, translate: TranslateFn) -> str:
        """The value of a ReadValue of the main graph: the variable, or its init when uninitialised."""
        var = self.variables[layer.attrs["variable_id"]]
        self.b.hint = layer.name
        exclusive = [self.graph.layers[i] for i in self.graph.order if i in var.exclusive]

        def init(builder: GraphBuilder) -> str:
            if builder is not self.b:  # an If branch: the init's own layers are computed there
                translate(exclusive, builder)
            return value_of(layer, 0)

        value = self._read(var, init)
        # The state read stays in the model (the variable keeps its ReadValue), but a read after the
        # Assign gives the value just written.
        return self._written[var.id] if var.after_assign else value

    def read_variable(self, var_id: str) -> str:
        """The value of a loop-body variable before the loop (see .loop_state): the variable, or zeros
        of its init shape when uninitialised (a computed init is then made in the body, by the flag)."""
        var = self.variables[var_id]
        zeros = np.zeros(var.init_shape, dtype=numpy_type(onnx_type(var.etype)))
        return self._read(var, lambda builder: builder.const(zeros, hint=f"{var.id}_zeros"))

    def flag(self, var_id: str) -> str:
        """The graph input telling a run that the variable is uninitialised (computed inits only)."""
        return self._flags[var_id]

    def _read(self, var: Variable, init_in: Callable[[GraphBuilder], str]) -> str:
        """``init_in(builder)`` makes the init value in ``builder`` (the main graph or an If branch)."""
        b = self.b
        etype = onnx_type(var.etype)
        if var.guarded:
            init_branch = b.sub(f"init_{var.id}")
            init = init_in(init_branch)
            if var.carrier_type != etype:
                init = init_branch.op("Cast", [init], {"to": var.carrier_type})
            init_out = init_branch.op("Identity", [init])
            init_branch.add_output(init_out, var.carrier_type, None)
            other = b.sub(f"skip_init_{var.id}")
            # A placeholder the run never reads (the variable is initialised when the flag is off);
            # the explicit form puts the state input here (see ortstate.passes.to_explicit).
            empty = np.zeros([0] * max(1, len(var.init_shape)), dtype=numpy_type(var.carrier_type))
            skip = other.op("Identity", [other.const(empty, hint=f"{var.id}_empty")])
            other.add_output(skip, var.carrier_type, None)
            init = b.op("If", [self._flags[var.id]], {"then_branch": init_branch.graph(), "else_branch": other.graph()})
        elif var.init == "zeros":
            init = b.const(np.zeros(var.init_shape, dtype=numpy_type(var.carrier_type)), hint=f"{var.id}_zeros")
        else:
            init = init_in(b)
            if var.carrier_type != etype:
                init = b.op("Cast", [init], {"to": var.carrier_type})
        value = b.op(READ_VALUE, [init, self.request_input], {VARIABLE_ID: var.id}, domain=CONTRIB_DOMAIN)
        if var.carrier_type != etype:
            value = b.op("Cast", [value], {"to": etype})
        self._record(var)
        return value

    def assign(self, layer: Layer, value: str) -> str:
        """An Assign of the main graph writes ``value``; returns the Assign's output (the same value)."""
        self.b.hint = layer.name
        return self.write_variable(layer.attrs["variable_id"], value)

    def write_variable(self, var_id: str, value: str) -> str:
        """Write ``value`` (of the variable's element type) to the variable; returns ``value``."""
        var = self.variables[var_id]
        b = self.b
        self._written[var.id] = value
        carried = value if var.carrier_type == onnx_type(var.etype) else b.op("Cast", [value], {"to": var.carrier_type})
        b.op(ASSIGN, [carried, self.request_input], {VARIABLE_ID: var.id}, domain=CONTRIB_DOMAIN)
        return value

    def _record(self, var: Variable) -> None:
        self.meta[var.id] = VariableMeta(
            id=var.id,
            element_type=var.etype.name,
            dtype=np.dtype(var.etype.dtype).name,
            shape=_meta_shape(var.shape),
            init=var.init,
            init_shape=list(var.init_shape),
            uninit_shape=list(var.uninit_shape),
            init_flag=self._flags.get(var.id),
            carrier=numpy_type(var.carrier_type).name,
            init_dims=None
            if var.init_dims is None or var.body is not None
            else [d if isinstance(d, int) else list(d) for d in var.init_dims],
        )


def _meta_shape(shape: PartialShape) -> list[int | list[int | None]] | None:
    if shape.dims is None:
        return None
    return [d.lo if d.is_static else [d.lo, d.hi] for d in shape.dims]

"""The model's variables: every ReadValue paired with its Assign, checked, as immutable records.

What the state writer (:mod:`.state`) writes for each variable is decided here, from the IR alone:
its element type and carrier, its shape, and its init (zeros the runtime makes, or computed by the
model, then possibly zeros of input dims).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from onnx import TensorProto

from ..errors import StateError
from ..ir import ElementType, Graph, Layer, PartialShape, element_type, parse_partial_shape
from ..ir.walk import producers_of, upstream
from ..meta import MAX_INIT_BYTES, MAX_STATE_ELEMENTS, name_prefix, shown_id, spanned_elements
from .dtypes import numpy_type, onnx_type
from .folding import constant_value
from .init_dims import InitDim, zeros_from_input_dims
from .uninitialised import uninitialised_shape

__all__ = ["Variable", "collect_variables"]
# PyOps cannot carry f16/bf16 (the process aborts): such variables cross the boundary as f32.
_CARRIED_AS_F32 = frozenset({"f16", "bf16"})


@dataclass(frozen=True)
class Variable:
    id: str
    read: Layer
    assign: Layer
    etype: ElementType
    shape: PartialShape
    init: str  # "zeros" | "computed"
    init_shape: tuple[int, ...]  # the zero init's (what the first run reads of a zero init)
    uninit_shape: tuple[int, ...]  # what query_state shows while uninitialised (see .uninitialised)
    # The ReadValue's input depends on the same variable's Assign: it runs after the write, and reads
    # the value written (OpenVINO's reference implementation runs ops in order; its CPU plugin
    # refuses such a model as a cycle).
    after_assign: bool = False
    body: Graph | None = None  # the loop body holding the ReadValue and Assign; None: the main graph
    init_dims: list[InitDim] | None = None  # a computed init that is zeros of input dims (see .init_dims)

    @property
    def carrier_type(self) -> int:
        return TensorProto.FLOAT if self.etype.name in _CARRIED_AS_F32 else onnx_type(self.etype)

    @property
    def flagged(self) -> bool:
        """Whether the writer gives the variable an init flag: a loop-body variable with a computed
        init (the loop computes it in the body when the flag says so; see .loop_state). Other
        computed inits get theirs from :func:`ortstate.passes.guard_inits`, where worth it."""
        return self.init == "computed" and self.body is not None


def _where(graph: Graph, layer: Layer) -> str:
    return f"{graph.source}: {layer.describe()}"


@dataclass(frozen=True, eq=False)
class _VariableWhere:
    """How an error about a variable begins, ``<file>: layer '...' (id N, Type-V): variable '...'``,
    written out only when an error is: :func:`shown_id` reads the whole id, which the file may make
    as long as it likes (formatting with ``f"{where}"`` calls ``__str__``)."""

    graph: Graph
    layer: Layer
    vid: str

    def __str__(self) -> str:
        return f"{_where(self.graph, self.layer)}: variable {shown_id(self.vid)}"


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
    return any(src.id == ancestor.id for src in upstream(graph, producers_of(graph, layer)))


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
                f"{where}: variable {shown_id(vid)} has two {layer.type} layers "
                f"('{name_prefix(first.name)}' id {first.id} and '{name_prefix(layer.name)}' id {layer.id})"
            )
        table[vid] = (g, layer, where)
    for vid, (_, _, where) in assigns.items():
        if vid not in reads:
            raise StateError(f"{where}: variable {shown_id(vid)} is assigned but never read (no ReadValue)")
    variables = []
    for vid, (g, read, where) in reads.items():
        if vid not in assigns:
            raise StateError(f"{where}: variable {shown_id(vid)} is read but never assigned (no Assign)")
        assign_graph, assign, assign_where = assigns[vid]
        if assign_graph is not g:
            raise StateError(
                f"{where}: variable {shown_id(vid)} is assigned by {assign_where.split(': ', 1)[1]}: a ReadValue and "
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
    where = _VariableWhere(graph, read, vid)
    has_init = bool(read.inputs)
    init_type = None
    init_shape = PartialShape(None)
    if has_init:
        init_type = next(iter(_types_of_value(graph, read, 0)), None)
        init_shape = _shape_of_value(graph, read, 0)
    declared_type, declared_shape = _declared(read, has_init, where)
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

    assign_where = _VariableWhere(graph, assign, vid)
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
    dims = zeros_from_input_dims(graph, read) if init_kind == "computed" and not after_assign else None
    variable = Variable(vid, read, assign, etype, shape, init_kind, zero_shape, shown, after_assign, init_dims=dims)
    _check_size(variable, where)
    return variable


def _declared(read: Layer, has_init: bool, where: _VariableWhere) -> tuple[ElementType | None, PartialShape]:
    """The type and shape a ReadValue-6 declares for its variable (None and a dynamic rank where
    it leaves them open; a ReadValue-3 declares neither)."""
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
    return declared_type, declared_shape


def _check_size(var: Variable, where: _VariableWhere) -> None:
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

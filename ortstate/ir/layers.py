"""Parse one ``<layer>``: attributes, ports, declared types and shapes, and a loop body's port map.

Every error names the layer as ``layer 'NAME' (id N)`` after a scope: the ``.xml`` path, or for a
layer inside a TensorIterator/Loop body, the path and the outer layer (``... (id 3) body``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable

from ..errors import IRError
from ..meta import name_prefix
from .graph import Edge, Graph, Layer, Port
from .shapes import PartialShape, parse_dim, parse_partial_shape
from .types import ElementType, element_type, element_type_of_precision

__all__ = ["KNOWN_OPSETS", "int_attr", "layer_where", "parse_layer"]

KNOWN_OPSETS = frozenset(f"opset{i}" for i in range(1, 18))
_LOOPS = ("TensorIterator", "Loop")

BodyParser = Callable[[ET.Element, str], Graph]


def layer_where(scope: str, name: str, lid: int) -> str:
    """How errors name a layer: ``<scope>: layer 'NAME' (id N)`` (the name as
    :func:`~ortstate.meta.name_prefix` cuts it)."""
    return f"{scope}: layer '{name_prefix(name)}' (id {lid})"


def int_attr(el: ET.Element, name: str, what: str, default: int | None = None) -> int:
    """An integer attribute of ``el``.

    Raises:
        IRError: it is missing (and there is no default) or not an integer; ``what`` starts the message.
    """
    raw = el.get(name)
    if raw is None:
        if default is not None:
            return default
        raise IRError(f"{what}: missing attribute '{name}'")
    try:
        return int(raw.strip())
    except ValueError:
        raise IRError(f"{what}: attribute '{name}' is not an integer: {raw!r}") from None


def parse_layer(el: ET.Element, scope: str, parse_body: BodyParser) -> Layer:
    """Parse a ``<layer>`` (its body, if any, through ``parse_body(body_element, body_scope)``).

    Raises:
        IRError: a missing or malformed id/type, an unknown opset, a bad port (id, precision,
            dimension), a Parameter/Const whose declared type or shape is bad or disagrees with its
            port, or a TensorIterator/Loop whose body, port map or back edges are inconsistent.
    """
    name = el.get("name")
    lid = int_attr(el, "id", f"{scope}: layer '{name_prefix(name) if name is not None else '?'}'")
    name = name if name is not None else f"layer_{lid}"
    where = layer_where(scope, name, lid)
    op_type = el.get("type")
    if not op_type:
        raise IRError(f"{where}: missing attribute 'type'")
    opset = el.get("version", "opset1")
    if opset not in KNOWN_OPSETS:
        raise IRError(f"{where}: unknown opset {opset!r} for {op_type}")
    data = el.find("data")
    attrs = dict(data.attrib) if data is not None else {}
    inputs = _parse_ports(el.find("input"), where)
    outputs = _parse_ports(el.find("output"), where)
    seen: set[int] = set()
    for port in inputs + outputs:
        if port.id in seen:
            raise IRError(f"{where}: duplicate port id {port.id}")
        seen.add(port.id)
    if op_type in ("Parameter", "Const"):
        _check_declared(op_type, attrs, outputs, where)
    rt_info = {a.get("name", ""): a.get("version", "") for a in el.findall("rt_info/attribute")}
    layer = Layer(lid, name, op_type, opset, attrs, inputs, outputs, rt_info)
    body_el = el.find("body")
    if body_el is None:
        if op_type in _LOOPS:
            raise IRError(f"{where}: {op_type} has no <body>")
        return layer
    body = parse_body(body_el, f"{where} body")
    port_map = _parse_port_map(el.find("port_map"), layer, body, where)
    back_edges = _parse_back_edges(el.find("back_edges"), body, where)
    return Layer(lid, name, op_type, opset, attrs, inputs, outputs, rt_info, body, port_map, back_edges)


def _parse_ports(el: ET.Element | None, where: str) -> tuple[Port, ...]:
    if el is None:
        return ()
    ports = []
    for p in el.findall("port"):
        pid = int_attr(p, "id", f"{where}: <port>")
        etype: ElementType | None = None
        precision = p.get("precision")
        if precision:
            try:
                etype = element_type_of_precision(precision)
            except KeyError:
                raise IRError(f"{where}: port {pid}: unknown element type {precision!r}") from None
        dims = []
        for d in p.findall("dim"):
            try:
                dims.append(parse_dim(d.text or ""))
            except ValueError as exc:
                raise IRError(f"{where}: port {pid}: {exc}") from None
        names = tuple(_tensor_names(p.get("names", "")))
        ports.append(Port(pid, etype, PartialShape(tuple(dims)), names))
    return tuple(ports)


# OpenVINO's IR reader: names are separated by commas (a literal one escaped as "\,"); empty ones
# are dropped, and whitespace is part of a name: a newline too (written "&#10;": one the file holds
# as such the XML parser reads as a space). A name: runs of plain characters between escapes ("\"
# and the next character, whatever it is; a last one kept), which the regex engine scans in one
# loop each (13x faster than an alternation per character on 100,000 of them); nothing matches two
# ways: no backtracking.
_NAME = re.compile(r"[^\\,]+(?:\\(?:.|\Z)[^\\,]*)*|(?:\\(?:.|\Z)[^\\,]*)+", re.DOTALL)


def _tensor_names(text: str) -> list[str]:
    return [name.replace("\\,", ",") for name in _NAME.findall(text)]


def _check_declared(op_type: str, attrs: dict[str, str], outputs: tuple[Port, ...], where: str) -> None:
    """A Parameter's or Const's ``element_type`` and ``shape``: present, valid, agreeing with its port."""
    for key in ("element_type", "shape"):
        if key not in attrs:
            raise IRError(f"{where}: missing attribute '{key}'")
    try:
        etype = element_type(attrs["element_type"])
    except KeyError:
        raise IRError(f"{where}: unknown element type {attrs['element_type']!r}") from None
    try:
        shape = parse_partial_shape(attrs["shape"])
    except ValueError as exc:
        raise IRError(f"{where}: bad shape {attrs['shape']!r}: {exc}") from None
    if op_type == "Const" and not shape.is_static:
        raise IRError(f"{where}: bad shape {attrs['shape']!r}: a Const shape must be static")
    if len(outputs) != 1:
        raise IRError(f"{where}: {op_type} must have one output port, not {len(outputs)}")
    port = outputs[0]
    if port.element_type is not None and port.element_type != etype:
        raise IRError(f"{where}: element_type {etype.name} but output port {port.id} is {port.element_type.name}")
    # A Parameter's port without dims is a scalar or a dynamic rank; one with dims must fit the declared
    # shape (converted inputs get the declared shape, and onnxruntime checks feeds only against that).
    if op_type == "Parameter" and port.shape.dims and not _fits(shape, port.shape):
        raise IRError(f"{where}: shape {shape} but output port {port.id} is {port.shape}")


def _fits(declared: PartialShape, port: PartialShape) -> bool:
    """True when the declared shape and the port's agree in rank and no two dims exclude each other."""
    if declared.dims is None or port.dims is None or len(declared.dims) != len(port.dims):
        return False
    return all(
        (a.hi is None or b.lo <= a.hi) and (b.hi is None or a.lo <= b.hi) for a, b in zip(declared.dims, port.dims)
    )


def _parse_port_map(el: ET.Element | None, layer: Layer, body: Graph, where: str) -> tuple[dict[str, str], ...]:
    if el is None:
        raise IRError(f"{where}: {layer.type} has no <port_map>")
    entries = []
    for entry in el:
        if entry.tag not in ("input", "output"):
            raise IRError(f"{where}: unexpected <{entry.tag}> in <port_map>")
        what = f"{where}: port_map {entry.tag}"
        external = int_attr(entry, "external_port_id", what)
        internal = int_attr(entry, "internal_layer_id", what)
        ports = layer.inputs if entry.tag == "input" else layer.outputs
        # Loop-5 maps its current_iteration / execution_condition body ports with external id -1.
        if external != -1 and all(p.id != external for p in ports):
            raise IRError(f"{what}: external_port_id {external} is not an {entry.tag} port of the layer")
        if internal not in body.layers:
            raise IRError(f"{what}: internal_layer_id {internal} is not a layer of the body")
        entries.append({"kind": entry.tag, **entry.attrib})
    return tuple(entries)


def _parse_back_edges(el: ET.Element | None, body: Graph, where: str) -> tuple[Edge, ...]:
    edges = []
    for index, e in enumerate(el.findall("edge") if el is not None else [], start=1):
        what = f"{where}: back edge #{index}"
        # Loop-5 writes back edges without ports: a body Result's input 0 to a body Parameter's output 0.
        edge = Edge(
            int_attr(e, "from-layer", what),
            int_attr(e, "from-port", what, default=0),
            int_attr(e, "to-layer", what),
            int_attr(e, "to-port", what, default=0),
        )
        for lid in (edge.from_layer, edge.to_layer):
            if lid not in body.layers:
                raise IRError(f"{what}: layer id {lid} is not a layer of the body")
        edges.append(edge)
    return tuple(edges)

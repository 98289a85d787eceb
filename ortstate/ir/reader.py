"""Read and validate an OpenVINO IR (v10/v11 ``.xml`` + ``.bin``) into a :class:`Graph`."""

from __future__ import annotations

import heapq
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import defusedxml
import defusedxml.ElementTree as SafeET

from ..errors import IRError
from .constants import decode_constant
from .graph import Edge, Graph, Layer, Port
from .shapes import PartialShape, parse_partial_shape
from .types import ElementType, element_type, element_type_of_precision

__all__ = ["KNOWN_OPSETS", "read_ir"]

KNOWN_OPSETS = frozenset(f"opset{i}" for i in range(1, 18))
_SUPPORTED_IR_VERSIONS = ("10", "11")
# Refuse before reading: an IR's XML is a few MB even for multi-GB models.
_MAX_XML_BYTES = 512 * 1024 * 1024


def read_ir(xml_path: str | os.PathLike[str], bin_path: str | os.PathLike[str] | None = None) -> Graph:
    """Read ``model.xml`` (and ``model.bin`` beside it unless ``bin_path`` is given).

    Raises:
        IRError: the files are missing or unreadable, the XML is malformed or hostile, or the graph
            is inconsistent (unknown types/opsets, bad constants, dangling edges, cycles). The message
            names the file and, where one is at fault, the layer.
    """
    xml_file = Path(xml_path)
    bin_file = Path(bin_path) if bin_path is not None else xml_file.with_suffix(".bin")
    src = str(xml_file)
    if not xml_file.is_file():
        raise IRError(f"{src}: no such file")
    if xml_file.stat().st_size > _MAX_XML_BYTES:
        raise IRError(f"{src}: XML file is larger than {_MAX_XML_BYTES >> 20} MiB")
    try:
        root = SafeET.parse(xml_file, forbid_dtd=True).getroot()
    except defusedxml.DefusedXmlException as exc:
        raise IRError(f"{src}: refused hostile XML ({type(exc).__name__}: DTDs and entities are not allowed)") from None
    except ET.ParseError as exc:
        raise IRError(f"{src}: malformed XML: {exc}") from None
    except OSError as exc:
        raise IRError(f"{src}: cannot read: {exc.strerror or exc}") from None
    if root.tag != "net":
        raise IRError(f"{src}: not an OpenVINO IR (root element is <{root.tag}>, expected <net>)")
    version = root.get("version", "")
    if version not in _SUPPORTED_IR_VERSIONS:
        raise IRError(f"{src}: unsupported IR version {version!r} (expected 10 or 11)")
    weights = _read_bin(bin_file, src, needed=root.find(".//layer[@type='Const']") is not None)
    graph = _parse_graph(root, src, weights, version=int(version))
    return graph


def _read_bin(path: Path, src: str, needed: bool) -> bytes:
    if not path.is_file():
        if needed:
            raise IRError(f"{src}: weights file {path} not found")
        return b""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise IRError(f"{src}: cannot read weights file {path}: {exc.strerror or exc}") from None


def _parse_graph(root: ET.Element, src: str, weights: bytes, version: int = 11) -> Graph:
    layers_el = root.find("layers")
    if layers_el is None:
        raise IRError(f"{src}: no <layers> element")
    layers: dict[int, Layer] = {}
    constants = {}
    for el in layers_el.findall("layer"):
        layer = _parse_layer(el, src, weights, version)
        if layer.id in layers:
            raise IRError(f"{src}: duplicate layer id {layer.id} ('{layers[layer.id].name}' and '{layer.name}')")
        layers[layer.id] = layer
        if layer.type == "Const":
            constants[layer.id] = _const_value(layer, src, weights)
    edges = _parse_edges(root.find("edges"), src, layers)
    order = _topological_order(layers, edges, src)
    rt_info = {}
    rt_el = root.find("rt_info")
    if rt_el is not None:
        for info in rt_el.iter("info"):
            if info.get("name") is not None and info.get("value") is not None:
                rt_info[info.get("name", "")] = info.get("value", "")
    return Graph(src, layers, tuple(edges), constants, order, version, root.get("name", ""), rt_info)


def _int_attr(el: ET.Element, name: str, what: str) -> int:
    raw = el.get(name)
    if raw is None:
        raise IRError(f"{what}: missing attribute '{name}'")
    try:
        return int(raw)
    except ValueError:
        raise IRError(f"{what}: attribute '{name}' is not an integer: {raw!r}") from None


def _parse_layer(el: ET.Element, src: str, weights: bytes, version: int) -> Layer:
    lid = _int_attr(el, "id", f"{src}: <layer name='{el.get('name', '?')}'>")
    name = el.get("name", f"layer_{lid}")
    op_type = el.get("type")
    opset = el.get("version", "opset1")
    where = f"{src}: layer '{name}' (id {lid})"
    if not op_type:
        raise IRError(f"{where}: missing attribute 'type'")
    if opset not in KNOWN_OPSETS:
        raise IRError(f"{where}: unknown opset {opset!r} for {op_type}")
    data = el.find("data")
    attrs = dict(data.attrib) if data is not None else {}
    inputs = _parse_ports(el.find("input"), where)
    outputs = _parse_ports(el.find("output"), where)
    seen = [p.id for p in inputs + outputs]
    if len(set(seen)) != len(seen):
        raise IRError(f"{where}: duplicate port ids {sorted(seen)}")
    rt_info = {a.get("name", ""): a.get("version", "") for a in el.findall("rt_info/attribute")}
    body = None
    port_map: tuple[dict[str, str], ...] = ()
    back_edges: tuple[Edge, ...] = ()
    body_el = el.find("body")
    if body_el is not None:
        body = _parse_graph(body_el, src, weights, version)
        pm = el.find("port_map")
        if pm is not None:
            port_map = tuple({"kind": p.tag, **p.attrib} for p in pm)
        be = el.find("back_edges")
        if be is not None:
            back_edges = tuple(
                Edge(*(_int_attr(e, k, where) for k in ("from-layer", "from-port", "to-layer", "to-port")))
                for e in be.findall("edge")
            )
    return Layer(lid, name, op_type, opset, attrs, inputs, outputs, rt_info, body, port_map, back_edges)


def _parse_ports(el: ET.Element | None, where: str) -> tuple[Port, ...]:
    if el is None:
        return ()
    ports = []
    for p in el.findall("port"):
        pid = _int_attr(p, "id", f"{where}: <port>")
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
                dims.append(parse_partial_shape(d.text or "").dims[0])  # type: ignore[index]
            except (ValueError, IndexError):
                raise IRError(f"{where}: port {pid}: bad dimension {d.text!r}") from None
        names = tuple(n.strip().replace("\\,", ",") for n in _split_names(p.get("names", "")) if n.strip())
        ports.append(Port(pid, etype, PartialShape(tuple(dims)), names))
    return tuple(ports)


def _split_names(text: str) -> list[str]:
    # Tensor names are comma separated; a literal comma is escaped as "\,".
    parts, cur, i = [], "", 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] == ",":
            cur += "\\,"
            i += 2
            continue
        if text[i] == ",":
            parts.append(cur)
            cur = ""
        else:
            cur += text[i]
        i += 1
    parts.append(cur)
    return parts


def _const_value(layer: Layer, src: str, weights: bytes):  # -> np.ndarray
    where = f"{src}: {layer.describe()}"
    try:
        etype = element_type(layer.attrs.get("element_type", ""))
    except KeyError:
        raise IRError(f"{where}: unknown element type {layer.attrs.get('element_type')!r}") from None
    return decode_constant(layer, etype, weights, where)


def _parse_edges(el: ET.Element | None, src: str, layers: dict[int, Layer]) -> list[Edge]:
    edges: list[Edge] = []
    fed: dict[tuple[int, int], Edge] = {}
    for e in el.findall("edge") if el is not None else []:
        what = f"{src}: edge {dict(e.attrib)}"
        edge = Edge(*(_int_attr(e, k, what) for k in ("from-layer", "from-port", "to-layer", "to-port")))
        src_layer, dst_layer = layers.get(edge.from_layer), layers.get(edge.to_layer)
        if src_layer is None or dst_layer is None:
            missing = edge.from_layer if src_layer is None else edge.to_layer
            raise IRError(f"{what}: refers to missing layer id {missing}")
        if src_layer.output_port(edge.from_port) is None:
            raise IRError(f"{src}: {src_layer.describe()} has no output port {edge.from_port} (edge to layer id {edge.to_layer})")
        if dst_layer.input_port(edge.to_port) is None:
            raise IRError(f"{src}: {dst_layer.describe()} has no input port {edge.to_port} (edge from layer id {edge.from_layer})")
        key = (edge.to_layer, edge.to_port)
        if key in fed:
            raise IRError(f"{src}: {dst_layer.describe()} input port {edge.to_port} has two producers")
        fed[key] = edge
        edges.append(edge)
    for layer in layers.values():
        for port in layer.inputs:
            if (layer.id, port.id) not in fed:
                raise IRError(f"{src}: {layer.describe()} input port {port.id} is not connected")
    return edges


def _topological_order(layers: dict[int, Layer], edges: list[Edge], src: str) -> tuple[int, ...]:
    """Kahn's algorithm, taking ready layers in XML order so the result is deterministic."""
    indegree = {lid: 0 for lid in layers}
    succ: dict[int, list[int]] = {lid: [] for lid in layers}
    for e in edges:
        indegree[e.to_layer] += 1
        succ[e.from_layer].append(e.to_layer)
    position = {lid: i for i, lid in enumerate(layers)}
    heap = [(position[lid], lid) for lid in layers if indegree[lid] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, lid = heapq.heappop(heap)
        order.append(lid)
        for nxt in succ[lid]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(heap, (position[nxt], nxt))
    if len(order) != len(layers):
        stuck = [layers[lid] for lid in layers if indegree[lid] > 0]
        names = ", ".join(f"'{lay.name}' (id {lay.id})" for lay in stuck[:5])
        raise IRError(f"{src}: the graph has a cycle through layers {names}")
    return tuple(order)

"""Read and validate an OpenVINO IR (v10/v11 ``.xml`` + ``.bin``) into a :class:`Graph`."""

from __future__ import annotations

import dataclasses
import hashlib
import mmap
import os
import stat
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import defusedxml
import defusedxml.ElementTree as SafeET
import numpy as np

from ..errors import IRError, IRFileError
from ..meta import name_prefix
from ..model_path import model_file
from .constants import ConstantTable, Packed, decode_constant
from .edges import parse_edges, topological_order
from .graph import Graph, Layer
from .layers import layer_where, parse_layer

__all__ = ["read_ir"]

_SUPPORTED_IR_VERSIONS = ("10", "11")
# Refuse before reading: an IR's XML is a few MB even for multi-GB models.
_MAX_XML_BYTES = 512 * 1024 * 1024
# Real models nest loops a few levels deep; the limit keeps hostile nesting from exhausting the stack.
_MAX_BODY_DEPTH = 64


def read_ir(xml_path: str | os.PathLike[str], bin_path: str | os.PathLike[str] | None = None) -> Graph:
    """Read ``model.xml`` (and ``model.bin`` beside it unless ``bin_path`` is given).

    The ``.bin`` is memory-mapped up to the last byte a Const declares; constants are read-only
    views into it, so reading an IR costs no copy of its weights. The graph's ``digest`` is a
    SHA-256 of both files as read (the ``.bin`` hashed on another thread while the XML is parsed).

    Raises:
        IRFileError: the ``.xml`` or the ``.bin`` it needs is missing or unreadable (an ``IRError``).
        IRError: the XML is malformed or hostile, or the graph
            is inconsistent (unknown types/opsets, bad shapes or constants, dangling edges, cycles).
            The message names the file and, where one is at fault, the layer as ``layer 'NAME' (id N)``.
    """
    xml_file = model_file(xml_path)
    bin_file = Path(bin_path) if bin_path is not None else xml_file.with_suffix(".bin")
    src = str(xml_file)
    root, xml_data = _read_xml(xml_file, src)
    if root.tag != "net":
        raise IRError(f"{src}: not an OpenVINO IR (root element is <{root.tag}>, expected <net>)")
    version = root.get("version")
    if version is None:
        raise IRError(f"{src}: <net> has no IR version")
    if version.strip() not in _SUPPORTED_IR_VERSIONS:
        raise IRError(f"{src}: unsupported IR version {version!r} (expected 10 or 11)")
    extent = _weights_extent(root)
    weights, bin_size = _read_bin(bin_file, src, extent, needed=extent is not None or bin_path is not None)
    digest = hashlib.sha256(xml_data)
    # hashlib lets go of the GIL on large buffers: a 2 GB .bin hashes on the other core meanwhile.
    hasher = threading.Thread(target=digest.update, args=(weights,), daemon=True)
    hasher.start()
    try:
        graph = _parse_graph(root, src, _Source(src, str(bin_file), weights, int(version), bin_size))
    finally:
        hasher.join()
    return dataclasses.replace(graph, digest=digest.hexdigest())


@dataclass(frozen=True)
class _Source:
    """What every (sub)graph of one IR shares: file names, the weights, the IR version."""

    xml: str
    bin_name: str
    weights: bytes | mmap.mmap = field(repr=False)
    version: int
    bin_size: int  # of the file: ``weights`` ends with the last byte a Const declares


def _read_xml(path: Path, src: str) -> tuple[ET.Element, bytes]:
    try:
        data, _ = _read_regular(path, _MAX_XML_BYTES, src, "XML file")
    except FileNotFoundError:
        raise IRFileError(f"{src}: no such file") from None
    except OSError as exc:
        raise IRFileError(f"{src}: cannot read: {exc.strerror or exc}") from None
    try:
        # No DTD means no entity can be declared: billion laughs and external entities stop at the
        # DOCTYPE, before anything is expanded or fetched.
        return SafeET.fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True), data
    except defusedxml.DefusedXmlException as exc:
        raise IRError(f"{src}: refused hostile XML: DTDs and entities are not allowed ({type(exc).__name__})") from None
    except ET.ParseError as exc:
        raise IRError(f"{src}: malformed XML: {exc}") from None
    except (ValueError, LookupError) as exc:  # e.g. an unknown encoding in the XML declaration
        raise IRError(f"{src}: malformed XML: {exc}") from None


def _read_bin(path: Path, src: str, extent: int | None, needed: bool) -> tuple[bytes | mmap.mmap, int]:
    """The ``.bin`` memory-mapped up to the last byte a Const declares (all of it when ``extent`` is
    None), and the file's size. Only a regular file is mapped: a FIFO would block, a device such as
    ``/dev/zero`` never ends."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb"):
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise IRFileError(f"{src}: weights file {path} is not a regular file")
            length = info.st_size if extent is None else min(info.st_size, extent)
            if length == 0:
                return b"", info.st_size
            # Read-only shared pages: the mapping lives as long as an array views it.
            return mmap.mmap(fd, length, access=mmap.ACCESS_READ), info.st_size
    except FileNotFoundError:
        if needed:
            raise IRFileError(f"{src}: weights file {path} not found") from None
        return b"", 0
    except OSError as exc:
        raise IRFileError(f"{src}: cannot read weights file {path}: {exc.strerror or exc}") from None


def _read_regular(path: Path, limit: int | None, src: str, what: str, too_large: bool = True) -> tuple[bytes, int]:
    """A regular file's first ``limit`` bytes (all of them if None) and its size; more than ``limit``
    is an error when ``too_large``. Anything else (a FIFO would block, a device such as ``/dev/zero`` never ends)
    is refused before a byte is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IRFileError(f"{src}: {what} is not a regular file")
        if too_large and limit is not None and info.st_size > limit:
            raise IRError(f"{src}: {what} is too large ({info.st_size} bytes, the limit is {limit})")
        size = info.st_size if limit is None else min(info.st_size, limit)
        return f.read(size), info.st_size


def _weights_extent(root: ET.Element) -> int | None:
    """The end of the furthest Const data the XML declares (None without Consts). Malformed
    offsets and sizes are skipped here: the Const's own check reports them."""
    end = None
    for el in root.iter("layer"):
        if el.get("type") != "Const":
            continue
        data = el.find("data")
        try:
            offset, size = int(data.get("offset", "").strip()), int(data.get("size", "").strip())  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            end = end or 0
            continue
        end = max(end or 0, offset + max(size, 0))
    return end


def _parse_graph(root: ET.Element, scope: str, source: _Source, depth: int = 0) -> Graph:
    """Parse a ``<net>`` or a loop ``<body>`` (``depth`` bodies deep); ``scope`` prefixes every error about it."""
    if depth > _MAX_BODY_DEPTH:
        raise IRError(f"{source.xml}: loop bodies are nested more than {_MAX_BODY_DEPTH} deep")
    layers_el = root.find("layers")
    if layers_el is None:
        raise IRError(f"{scope}: no <layers> element")
    layers: dict[int, Layer] = {}
    constants: dict[int, np.ndarray | Packed] = {}
    for el in layers_el.findall("layer"):
        layer = parse_layer(el, scope, lambda body, body_scope: _parse_graph(body, body_scope, source, depth + 1))
        where = layer_where(scope, layer.name, layer.id)
        if layer.id in layers:
            first = layers[layer.id]
            raise IRError(f"{where}: duplicate layer id (also used by layer '{name_prefix(first.name)}')")
        layers[layer.id] = layer
        if layer.type == "Const":
            constants[layer.id] = decode_constant(layer, source.weights, where, source.bin_name, source.bin_size)
    edges = parse_edges(root.find("edges"), scope, layers)
    order = topological_order(layers, edges, scope)
    rt_info = _model_rt_info(root.find("rt_info"))
    return Graph(
        source.xml, layers, edges, ConstantTable(constants), order, source.version, root.get("name", ""), rt_info
    )


def _model_rt_info(el: ET.Element | None) -> dict[str, str]:
    """Model rt_info flat: ``<info name="N" value="V"/>`` as ``N``, nested ``<a><b value="V"/></a>`` as ``a/b``."""
    out: dict[str, str] = {}
    # A stack, not recursion: the nesting depth is the file's to choose.
    stack = [(child, "") for child in reversed(el)] if el is not None else []
    while stack:
        node, prefix = stack.pop()
        key = prefix + (node.get("name", "") if node.tag == "info" else node.tag)
        value = node.get("value")
        if value is not None:
            out[key] = value
        stack.extend((child, key + "/") for child in reversed(node))
    return out

"""Seeded mutation fuzzing of real IRs: the mutants, and the verdict on what converting one did.

``mutant(seed, index)`` damages one of :data:`BASES` (its XML or its ``.bin``) reproducibly and
independently of every other index. :func:`verdict` says whether an outcome is acceptable: a model
that runs a step (or fails its run with ``RunError``), or an ``OrtStateError`` whose message names
the file and, for damage aimed at one layer, a layer or an edge. ``fuzz_pool`` runs the mutants.
"""

from __future__ import annotations

import copy
import random
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASES: tuple[str, ...] = (
    "models/lstm_1l/model.xml",
    "models/lstm_2l_f16/model.xml",
    "models/gru_2l/model.xml",
    "models/lstmcell_step/model.xml",
    "models/ti_lowlatency_const/model.xml",
    "models/ti_lowlatency_param/model.xml",
    "models/loop_lowlatency_const/model.xml",
    "models/loop_lowlatency_param/model.xml",
    "models/kv_cache_toy/model.xml",
    "ortstate/_demo/char_lstm.xml",
    "models/llm/llama_int4/openvino_model.xml",
    "models/llm/gpt2/openvino_model.xml",
)
# run_oom: the model as written computes a tensor larger than the worker's memory limit (a junk
# constant in a shape, say) and onnxruntime refuses the allocation with RunError, state untouched.
ACCEPTABLE = frozenset({"ok", "run_error", "run_oom", "rejected", "too_large"})

JUNK = ["", "9" * 30, "a" * 5000, "\u00e9\u4e2d", "\\", ","] + (
    "-1 0 x 1e9 4294967296 9223372036854775808 -9223372036854775809 nan inf 1.5 ? ... 1.. -1..-5 2,3 true".split()
)
PLAUSIBLE = "0 1 -1 2 3 -3 true false numpy none pdpd ? ... 1,1,16 1,4 f32 i64 i32 u8".split()
DIMS = ["", *"-1 0 -7 1 2 4294967296 9223372036854775807 99999999999 x ? 1..3".split()]
SHAPES = ["", *"1,2,3 -1 0 ? ... 2147483648,2147483648 99999,99999,99999 1,-5 [1,2] 1..,?".split()]
ETYPES = "f32 f16 bf16 f64 i4 i8 i16 i32 i64 u1 u4 u8 u16 u32 u64 boolean string nf4 f8e4m3 f8e5m2 f4e2m1".split()
ETYPES += ["dynamic", "undefined", "u3", "junk"]
PRECISIONS = "FP32 FP16 BF16 FP64 I8 I32 I64 U8 U1 BOOL STRING DYNAMIC XX".split()
DOCTYPES = [
    '<!DOCTYPE net [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>',
    '<!DOCTYPE net [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
    '<!DOCTYPE net SYSTEM "http://127.0.0.1:9/evil.dtd">',
    '<!DOCTYPE net [<!ENTITY % p SYSTEM "file:///etc/hostname"> %p;]>',
]


@dataclass(frozen=True)
class Mutant:
    """One damaged IR: which base, what was done, and (when the damage is aimed at one) the layer."""

    index: int
    base: str
    kind: str
    detail: str
    layer: str | None
    xml: bytes
    bin: bytes

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "model.xml").write_bytes(self.xml)
        (directory / "model.bin").write_bytes(self.bin)
        return directory / "model.xml"


_cache: dict[str, tuple[bytes, bytes, ET.Element]] = {}


def base_files(path: str) -> tuple[bytes, bytes, ET.Element]:
    """A base IR's .xml and .bin bytes and its parsed tree (read once)."""
    if path not in _cache:
        xml = (ROOT / path).read_bytes()
        _cache[path] = (xml, (ROOT / path).with_suffix(".bin").read_bytes(), ET.fromstring(xml))  # trusted input
    return _cache[path]


def mutant(seed: int, index: int, bases: tuple[str, ...] = BASES) -> Mutant:
    """The ``index``-th mutant of campaign ``seed`` (independent of every other index)."""
    rng = random.Random(f"{seed}:{index}")
    base = bases[index % len(bases)]
    xml, weights, tree = base_files(base)
    kind = rng.choices(list(_OPS), weights=[w for w, _ in _OPS.values()])[0]
    detail, layer, new_xml, new_bin = _OPS[kind][1](rng, xml, weights, copy.deepcopy(tree))
    return Mutant(index, base, kind, detail, layer, new_xml, new_bin)


# -- mutation operators: (rng, xml, bin, tree copy) -> (detail, layer name, xml, bin) -------------
Result = tuple[str, "str | None", bytes, bytes]


def _dump(root: ET.Element) -> bytes:
    return b'<?xml version="1.0"?>\n' + ET.tostring(root, encoding="utf-8")


def _owner(root: ET.Element) -> dict[ET.Element, ET.Element]:
    """Each element's nearest enclosing <layer>."""
    out: dict[ET.Element, ET.Element] = {}
    stack: list[tuple[ET.Element, ET.Element | None]] = [(root, None)]
    while stack:
        el, layer = stack.pop()
        layer = el if el.tag == "layer" else layer
        if layer is not None:
            out[el] = layer
        stack.extend((child, layer) for child in el)
    return out


def _parent(root: ET.Element, tag: str, rng: random.Random) -> tuple[ET.Element, ET.Element] | None:
    pairs = [(p, c) for p in root.iter() for c in p if c.tag == tag]
    return rng.choice(pairs) if pairs else None


def _name(owner: dict[ET.Element, ET.Element], el: ET.Element) -> str | None:
    layer = owner.get(el)
    return None if layer is None else layer.get("name")


def op_delete(tag: str):  # noqa: ANN201
    def run(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
        owner = _owner(root)
        found = _parent(root, tag, rng)
        if found is None:
            return f"no <{tag}> to delete", None, xml, weights
        parent, child = found
        layer = _name(owner, child) if tag != "layer" else None
        parent.remove(child)
        return f"deleted <{tag}> {child.attrib}", layer, _dump(root), weights

    return run


def op_duplicate(tag: str):  # noqa: ANN201
    def run(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
        found = _parent(root, tag, rng)
        if found is None:
            return f"no <{tag}> to duplicate", None, xml, weights
        parent, child = found
        twin = copy.deepcopy(child)
        if tag == "layer" and rng.random() < 0.5:
            twin.set("id", str(max(int(x.get("id", "0")) for x in parent) + 1))
        parent.insert(list(parent).index(child) + 1, twin)
        return f"duplicated <{tag}> {child.attrib}", None, _dump(root), weights

    return run


def op_rewire(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
    """Point an edge elsewhere: a random layer/port, or back upstream to close a cycle."""
    found = _parent(root, "edge", rng)
    if found is None:
        return "no edge", None, xml, weights
    edges, edge = found
    if rng.random() < 0.5:
        key = rng.choice(["from-layer", "from-port", "to-layer", "to-port"])
        old = edge.get(key)
        edge.set(key, str(rng.choice([-1, 0, 1, 2, 3, 7, 99999, int(old or 0) + 1])))
        return f"edge {edge.attrib}: {key} was {old}", None, _dump(root), weights
    # Cycle: for an edge a -> b, feed a's first input from b's output.
    a, b = edge.get("from-layer"), edge.get("to-layer")
    into_a = [e for e in edges if e.get("to-layer") == a]
    out_b = [e for e in edges if e.get("from-layer") == b]
    if not into_a or not out_b:
        return "no cycle possible here", None, xml, weights
    target = rng.choice(into_a)
    target.set("from-layer", b)
    target.set("from-port", out_b[0].get("from-port", "0"))
    return f"cycle: layer {a} now fed by layer {b}", None, _dump(root), weights


def _attr_el(rng: random.Random, root: ET.Element, keys: tuple[str, ...] | None) -> tuple[ET.Element, str] | None:
    pool = [(el, k) for el in root.iter() for k in el.attrib if keys is None or k in keys]
    return rng.choice(pool) if pool else None


def op_attr(values: list[str], keys: tuple[str, ...] | None, data_only: bool = False):  # noqa: ANN201
    def run(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
        owner = _owner(root)
        scope = list(root.iter("data")) if data_only else [root]
        pool = [p for s in scope if (p := _attr_el(rng, s, keys)) is not None]
        if not pool:
            return "no attribute", None, xml, weights
        el, key = rng.choice(pool)
        old, new = el.get(key), rng.choice(values)
        el.set(key, new)
        return f"<{el.tag} {key}> {old!r} -> {new[:20]!r}", _name(owner, el), _dump(root), weights

    return run


def _tweak(old: str, rng: random.Random) -> str:
    """A value of the same kind as ``old``, close to it: the damage a real bug in an exporter does."""
    if old in ("true", "false"):
        return "false" if old == "true" else "true"
    parts = old.split(",")
    if all(re.fullmatch(r"\s*-?\d+\s*", p) for p in parts):
        i = rng.randrange(len(parts))
        parts[i] = str(int(parts[i]) + rng.choice([-2, -1, 1, 2]))
        return ",".join(parts)
    return rng.choice(PLAUSIBLE)


def op_tweak(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
    owner = _owner(root)
    pool = [(el, k) for el in root.iter("data") for k in el.attrib]
    el, key = rng.choice(pool)
    old = el.get(key, "")
    el.set(key, _tweak(old, rng))
    return f"<data {key}> {old[:20]!r} -> {el.get(key, '')[:20]!r}", _name(owner, el), _dump(root), weights


def op_dim(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
    owner = _owner(root)
    found = _parent(root, "dim", rng)
    if found is None:
        return "no dim", None, xml, weights
    port, dim = found
    choice = rng.random()
    if choice < 0.6:
        old, dim.text = dim.text, rng.choice(DIMS)
        detail = f"dim {old} -> {dim.text}"
    elif choice < 0.8:
        port.remove(dim)
        detail = "dim removed"
    else:
        port.append(copy.deepcopy(dim))
        detail = "dim added"
    return detail, _name(owner, dim), _dump(root), weights


def op_type(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
    layers = list(root.iter("layer"))
    layer = rng.choice(layers)
    if rng.random() < 0.7:
        old, new = layer.get("type"), rng.choice(layers).get("type") or "Add"
        layer.set("type", new)
    else:
        old, new = layer.get("version"), f"opset{rng.randrange(0, 20)}"
        layer.set("version", new)
    return f"layer type/version {old} -> {new}", layer.get("name"), _dump(root), weights


def op_truncate(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
    cut = rng.randrange(len(xml))
    return f"xml truncated at {cut}", None, xml[:cut], weights


def op_bytes(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
    data = bytearray(xml)
    for _ in range(rng.randrange(1, 8)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return "random xml bytes", None, bytes(data), weights


def op_doctype(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
    head, _, rest = xml.partition(b"?>")
    doctype = rng.choice(DOCTYPES)
    body = rest.replace(b'name="', b'name="&d;', 1) if "ENTITY a" in doctype else rest
    return f"DOCTYPE {doctype[:40]}", None, head + b"?>" + doctype.encode() + body, weights


def op_const(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
    """Overwrite a small Const (shapes, axes, indices live there) with extreme or random bytes."""
    consts = [el for el in root.iter("layer") if el.get("type") == "Const" and el.find("data") is not None]
    small = [el for el in consts if 0 < int(el.find("data").get("size", "0")) <= 64]  # type: ignore[union-attr]
    if not small:
        return "no small Const", None, xml, weights
    layer = rng.choice(small)
    data = layer.find("data")
    offset, size = int(data.get("offset", "0")), int(data.get("size", "0"))  # type: ignore[union-attr]
    fill = rng.choice([b"\xff", b"\x7f", b"\x80", b"\x00", b"\x01\x00\x00\x80"]) * size if rng.random() < 0.5 else None
    new = fill[:size] if fill is not None else rng.randbytes(size)
    out = weights[:offset] + new + weights[offset + size :]
    return f"Const bytes [{offset}:{offset + size}] = {new[:16].hex()}", layer.get("name"), xml, out


def op_bin(rng: random.Random, xml: bytes, weights: bytes, root: ET.Element) -> Result:
    mode = rng.choice(["truncate", "extend", "zero", "random", "empty"])
    a = rng.randrange(max(len(weights), 1))
    b = min(len(weights), a + rng.randrange(1, 4096))
    if mode == "truncate":
        return f"bin truncated at {a}", None, xml, weights[:a]
    if mode == "extend":
        return "bin extended", None, xml, weights + rng.randbytes(rng.randrange(1, 4096))
    if mode == "empty":
        return "bin emptied", None, xml, b""
    fill = bytes(b - a) if mode == "zero" else rng.randbytes(b - a)
    return f"bin {mode} [{a}:{b}]", None, xml, weights[:a] + fill + weights[b:]


_OPS: dict[str, tuple[int, Any]] = {
    "delete_layer": (4, op_delete("layer")),
    "duplicate_layer": (3, op_duplicate("layer")),
    "delete_edge": (4, op_delete("edge")),
    "duplicate_edge": (2, op_duplicate("edge")),
    "delete_port": (3, op_delete("port")),
    "rewire_edge": (5, op_rewire),
    "attr_junk": (10, op_attr(JUNK, None, data_only=True)),
    "any_attr_junk": (5, op_attr(JUNK, None)),
    "attr_tweak": (10, op_tweak),
    "element_type": (6, op_attr(ETYPES, ("element_type", "destination_type", "variable_type", "output_type"))),
    "precision": (3, op_attr(PRECISIONS, ("precision",))),
    "shape_attr": (5, op_attr(SHAPES, ("shape", "variable_shape", "axis", "axes", "special_zero"))),
    "dim": (8, op_dim),
    "layer_type": (4, op_type),
    "truncate_xml": (3, op_truncate),
    "xml_bytes": (3, op_bytes),
    "doctype": (2, op_doctype),
    "const_bytes": (8, op_const),
    "bin": (8, op_bin),
}


# -- judging outcomes ---------------------------------------------------------------------------------
_LOCATED = re.compile(r"layer '[^']*'|edge -?\d+:-?\d+ -> |edge #\d+")
_ALLOC = re.compile(r"bad_alloc|[Ff]ailed to allocate|out of memory", re.IGNORECASE)


def verdict(m: Mutant | None, xml: str, result: dict[str, Any]) -> str:
    """The outcome, with acceptable-looking ones checked further: those in :data:`ACCEPTABLE` are fine;
    anything else (``crash``, ``hang``, ``memory``, ``exception``, ``unnamed_file``, ``unlocated``,
    ``wrong_error``, ``rewrite_failed``, ``rewrite_mismatch``: the custom-op model ran but its
    explicit rewrite did not, or gave other outputs) is a bug."""
    outcome = result["outcome"]
    message = result.get("message", "")
    if outcome == "run_error" and _ALLOC.search(message):
        return "run_oom"
    if outcome != "rejected":
        return outcome
    if xml not in message and not (result["stage"] == "load" and Path(xml).name in message):
        return "unnamed_file"
    if m is not None and m.layer is not None and result["error"] != "UnsupportedOpsError":
        if not _LOCATED.search(message):
            return "unlocated"
    return "rejected"

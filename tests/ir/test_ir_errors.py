"""Broken IRs, hand-written: each raises exactly IRError (IRFileError: a file missing or unreadable),
with the whole message pinned."""

from __future__ import annotations

import errno
import os
import random
import re
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ortstate.errors import IRError, IRFileError
from ortstate.ir import read_ir, reader

# Parameter x and Const w (two f32 in the .bin) feed Add; its output goes to a Result.
BASE = """<?xml version="1.0"?>
<net name="m" version="11">
  <layers>
    <layer id="0" name="x" type="Parameter" version="opset1">
      <data shape="2" element_type="f32"/>
      <output><port id="0" precision="FP32" names="x"><dim>2</dim></port></output>
    </layer>
    <layer id="1" name="w" type="Const" version="opset1">
      <data element_type="f32" shape="2" offset="0" size="8"/>
      <output><port id="0" precision="FP32"><dim>2</dim></port></output>
    </layer>
    <layer id="2" name="add" type="Add" version="opset1">
      <data auto_broadcast="numpy"/>
      <input><port id="0" precision="FP32"><dim>2</dim></port><port id="1" precision="FP32"><dim>2</dim></port></input>
      <output><port id="2" precision="FP32" names="y"><dim>2</dim></port></output>
    </layer>
    <layer id="3" name="out" type="Result" version="opset1">
      <input><port id="0" precision="FP32"><dim>2</dim></port></input>
    </layer>
  </layers>
  <edges>
    <edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>
    <edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>
    <edge from-layer="2" from-port="2" to-layer="3" to-port="0"/>
  </edges>
</net>
"""
BASE_BIN = struct.pack("<2f", 1.0, 2.0)

# A Loop-5 adding w to x three times; its body reads the same .bin (trip count, condition, bw).
LOOP = """<?xml version="1.0"?>
<net name="m" version="11">
  <layers>
    <layer id="0" name="x" type="Parameter" version="opset1">
      <data shape="2" element_type="f32"/>
      <output><port id="0" precision="FP32" names="x"><dim>2</dim></port></output>
    </layer>
    <layer id="1" name="trip" type="Const" version="opset1">
      <data element_type="i64" shape="" offset="0" size="8"/>
      <output><port id="0" precision="I64"/></output>
    </layer>
    <layer id="2" name="cond" type="Const" version="opset1">
      <data element_type="boolean" shape="" offset="8" size="1"/>
      <output><port id="0" precision="BOOL"/></output>
    </layer>
    <layer id="3" name="loop" type="Loop" version="opset5">
      <port_map>
        <input external_port_id="2" internal_layer_id="0"/>
        <output external_port_id="3" internal_layer_id="3"/>
        <output external_port_id="-1" internal_layer_id="5" purpose="execution_condition"/>
      </port_map>
      <back_edges><edge from-layer="3" to-layer="0"/></back_edges>
      <input>
        <port id="0" precision="I64"/><port id="1" precision="BOOL"/>
        <port id="2" precision="FP32"><dim>2</dim></port>
      </input>
      <output><port id="3" precision="FP32" names="y"><dim>2</dim></port></output>
      <body>
        <layers>
          <layer id="0" name="bx" type="Parameter" version="opset1">
            <data shape="2" element_type="f32"/>
            <output><port id="0" precision="FP32"><dim>2</dim></port></output>
          </layer>
          <layer id="1" name="bw" type="Const" version="opset1">
            <data element_type="f32" shape="2" offset="9" size="8"/>
            <output><port id="0" precision="FP32"><dim>2</dim></port></output>
          </layer>
          <layer id="2" name="badd" type="Add" version="opset1">
            <data auto_broadcast="numpy"/>
            <input>
              <port id="0" precision="FP32"><dim>2</dim></port><port id="1" precision="FP32"><dim>2</dim></port>
            </input>
            <output><port id="2" precision="FP32"><dim>2</dim></port></output>
          </layer>
          <layer id="3" name="bout" type="Result" version="opset1">
            <input><port id="0" precision="FP32"><dim>2</dim></port></input>
          </layer>
          <layer id="4" name="bcond" type="Const" version="opset1">
            <data element_type="boolean" shape="" offset="8" size="1"/>
            <output><port id="0" precision="BOOL"/></output>
          </layer>
          <layer id="5" name="bcond_out" type="Result" version="opset1">
            <input><port id="0" precision="BOOL"/></input>
          </layer>
        </layers>
        <edges>
          <edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>
          <edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>
          <edge from-layer="2" from-port="2" to-layer="3" to-port="0"/>
          <edge from-layer="4" from-port="0" to-layer="5" to-port="0"/>
        </edges>
      </body>
    </layer>
    <layer id="4" name="out" type="Result" version="opset1">
      <input><port id="0" precision="FP32"><dim>2</dim></port></input>
    </layer>
  </layers>
  <edges>
    <edge from-layer="0" from-port="0" to-layer="3" to-port="2"/>
    <edge from-layer="1" from-port="0" to-layer="3" to-port="0"/>
    <edge from-layer="2" from-port="0" to-layer="3" to-port="1"/>
    <edge from-layer="3" from-port="3" to-layer="4" to-port="0"/>
  </edges>
</net>
"""
LOOP_BIN = struct.pack("<q?2f", 3, True, 0.5, 1.5)

# Add a (x + b) feeds Relu b, which feeds back into a: a cycle; the Result after it is not on it.
CYCLE = """<?xml version="1.0"?>
<net name="m" version="11">
  <layers>
    <layer id="0" name="x" type="Parameter" version="opset1">
      <data shape="2" element_type="f32"/>
      <output><port id="0" precision="FP32"><dim>2</dim></port></output>
    </layer>
    <layer id="1" name="a" type="Add" version="opset1">
      <input><port id="0" precision="FP32"><dim>2</dim></port><port id="1" precision="FP32"><dim>2</dim></port></input>
      <output><port id="2" precision="FP32"><dim>2</dim></port></output>
    </layer>
    <layer id="2" name="b" type="Relu" version="opset1">
      <input><port id="0" precision="FP32"><dim>2</dim></port></input>
      <output><port id="1" precision="FP32"><dim>2</dim></port></output>
    </layer>
    <layer id="3" name="out" type="Result" version="opset1">
      <input><port id="0" precision="FP32"><dim>2</dim></port></input>
    </layer>
  </layers>
  <edges>
    <edge from-layer="0" from-port="0" to-layer="1" to-port="0"/>
    <edge from-layer="2" from-port="1" to-layer="1" to-port="1"/>
    <edge from-layer="1" from-port="2" to-layer="2" to-port="0"/>
    <edge from-layer="2" from-port="1" to-layer="3" to-port="0"/>
  </edges>
</net>
"""

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE net [
  <!ENTITY a "ha ha ha ha ha ha ha ha ha ha">
  <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
  <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
  <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
  <!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
  <!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
  <!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;">
  <!ENTITY h "&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;">
  <!ENTITY i "&h;&h;&h;&h;&h;&h;&h;&h;&h;&h;">
]>
<net name="&i;" version="11"><layers/></net>
"""
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE net [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<net name="&secret;" version="11"><layers/></net>
"""
EXTERNAL_DTD = """<?xml version="1.0"?>
<!DOCTYPE net SYSTEM "http://127.0.0.1:9/ir.dtd">
<net name="m" version="11"><layers/></net>
"""

NESTED = (
    '<net version="11"><layers>'
    + '<layer id="0" name="l" type="TensorIterator" version="opset1"><body><layers>' * 70
    + "</layers></body></layer>" * 70
    + "</layers></net>"
)

Setup = Callable[[Path, pytest.MonkeyPatch], "tuple[Path, Path | None]"]


def ir(text: str, *edits: tuple[str, str], bin_data: bytes | None = BASE_BIN, bin_arg: str | None = None) -> Setup:
    """Write ``text`` with each (old, new) edit applied once as model.xml (and ``bin_data`` as model.bin)."""
    for old, new in edits:
        assert text.count(old) == 1, f"edit target {old!r} must occur exactly once"
        text = text.replace(old, new)

    def setup(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Path, Path | None]:
        (tmp / "model.xml").write_text(text)
        if bin_data is not None:
            (tmp / "model.bin").write_bytes(bin_data)
        return tmp / "model.xml", tmp / bin_arg if bin_arg else None

    return setup


def loop(*edits: tuple[str, str]) -> Setup:
    return ir(LOOP, *edits, bin_data=LOOP_BIN)


def unreadable(name: str) -> Setup:
    """``name`` in tmp cannot be read: chmod 000, or (as root, who reads anything) a patched read."""

    def setup(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Path, Path | None]:
        result = ir(BASE)(tmp, mp)
        target = tmp / name
        if os.geteuid() != 0:
            target.chmod(0)
            return result
        real = os.open

        def open_(path: str | os.PathLike[str], *args: Any, **kwargs: Any) -> int:
            if Path(path) == target:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return real(path, *args, **kwargs)

        mp.setattr(os, "open", open_)
        return result

    return setup


def directory_as_xml(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Path, Path | None]:
    (tmp / "model.xml").mkdir()
    return tmp / "model.xml", None


def small_xml_limit(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[Path, Path | None]:
    mp.setattr(reader, "_MAX_XML_BYTES", 1024 * 1024 // 2)
    (tmp / "model.xml").write_bytes(BASE.encode().ljust(600_000))
    return tmp / "model.xml", None


PARAM = 'type="Parameter" version="opset1">\n      <data shape="2" element_type="f32"/>'
CONST = '<data element_type="f32" shape="2" offset="0" size="8"/>'
ADD_OUT = '<port id="2" precision="FP32" names="y"><dim>2</dim></port>'
EDGE_W = '<edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>'
EDGE_OUT = '<edge from-layer="2" from-port="2" to-layer="3" to-port="0"/>'
X = "{tmp}/model.xml"
LAYER_X, LAYER_W, LAYER_ADD = f"{X}: layer 'x' (id 0)", f"{X}: layer 'w' (id 1)", f"{X}: layer 'add' (id 2)"
BODY = f"{X}: layer 'loop' (id 3)"

CASES: list[tuple[str, Setup, str]] = [
    # files
    ("xml missing", lambda tmp, mp: (tmp / "model.xml", None), f"{X}: no such file"),
    ("xml is a directory", directory_as_xml, f"{X}: a folder with no model in it (an OpenVINO .xml or an .onnx file)"),
    ("xml unreadable", unreadable("model.xml"), f"{X}: cannot read: Permission denied"),
    ("xml too large", small_xml_limit, f"{X}: XML file is too large (600000 bytes, the limit is 524288)"),
    ("bin missing", ir(BASE, bin_data=None), f"{X}: weights file {{tmp}}/model.bin not found"),
    ("given bin missing", ir(BASE, bin_arg="other.bin"), f"{X}: weights file {{tmp}}/other.bin not found"),
    ("bin unreadable", unreadable("model.bin"), f"{X}: cannot read weights file {{tmp}}/model.bin: Permission denied"),
    # XML
    ("empty xml", ir(""), f"{X}: malformed XML: no element found: line 1, column 0"),
    ("malformed xml", ir(BASE, ("</layers>", "</layer>")), f"{X}: malformed XML: mismatched tag: line 20, column 4"),
    (
        "undefined entity",
        ir(BASE, ('name="m"', 'name="&m;"')),
        f"{X}: malformed XML: undefined entity: line 2, column 0",
    ),
    (
        "billion laughs",
        ir(BILLION_LAUGHS),
        f"{X}: refused hostile XML: DTDs and entities are not allowed (DTDForbidden)",
    ),
    (
        "external entity",
        ir(EXTERNAL_ENTITY),
        f"{X}: refused hostile XML: DTDs and entities are not allowed (DTDForbidden)",
    ),
    ("external dtd", ir(EXTERNAL_DTD), f"{X}: refused hostile XML: DTDs and entities are not allowed (DTDForbidden)"),
    (
        "root not net",
        ir('<?xml version="1.0"?><model version="11"/>'),
        f"{X}: not an OpenVINO IR (root element is <model>, expected <net>)",
    ),
    ("no version", ir(BASE, (' version="11"', "")), f"{X}: <net> has no IR version"),
    ("IR v7", ir(BASE, ('version="11"', 'version="7"')), f"{X}: unsupported IR version '7' (expected 10 or 11)"),
    ("no layers", ir('<net version="10"><edges/></net>'), f"{X}: no <layers> element"),
    # layers and ports
    ("layer id missing", ir(BASE, ('id="0" name="x"', 'name="x"')), f"{X}: layer 'x': missing attribute 'id'"),
    (
        "layer id not int",
        ir(BASE, ('id="0" name="x"', 'id="zero" name="x"')),
        f"{X}: layer 'x': attribute 'id' is not an integer: 'zero'",
    ),
    ("layer type missing", ir(BASE, (' type="Add"', "")), f"{LAYER_ADD}: missing attribute 'type'"),
    (
        "unknown opset",
        ir(BASE, ('type="Add" version="opset1"', 'type="Add" version="opset99"')),
        f"{LAYER_ADD}: unknown opset 'opset99' for Add",
    ),
    (
        "duplicate layer id",
        ir(BASE, ('id="1" name="w"', 'id="0" name="w"')),
        f"{X}: layer 'w' (id 0): duplicate layer id (also used by layer 'x')",
    ),
    (
        "port id missing",
        ir(BASE, (ADD_OUT, '<port precision="FP32"/>')),
        f"{LAYER_ADD}: <port>: missing attribute 'id'",
    ),
    ("duplicate port id", ir(BASE, (ADD_OUT, '<port id="1" precision="FP32"/>')), f"{LAYER_ADD}: duplicate port id 1"),
    (
        "unknown port precision",
        ir(BASE, (ADD_OUT, '<port id="2" precision="FP33"/>')),
        f"{LAYER_ADD}: port 2: unknown element type 'FP33'",
    ),
    (
        "bad port dim",
        ir(BASE, (ADD_OUT, '<port id="2"><dim>two</dim></port>')),
        f"{LAYER_ADD}: port 2: 'two' is not a dimension",
    ),
    (
        "negative port dim",
        ir(BASE, (ADD_OUT, '<port id="2"><dim>-3</dim></port>')),
        f"{LAYER_ADD}: port 2: negative dimension -3",
    ),
    ("empty port dim", ir(BASE, (ADD_OUT, '<port id="2"><dim></dim></port>')), f"{LAYER_ADD}: port 2: empty dimension"),
    # Parameter
    (
        "parameter type unknown",
        ir(BASE, (PARAM, PARAM.replace("f32", "f33"))),
        f"{LAYER_X}: unknown element type 'f33'",
    ),
    (
        "parameter type missing",
        ir(BASE, (PARAM, PARAM.replace(' element_type="f32"', ""))),
        f"{LAYER_X}: missing attribute 'element_type'",
    ),
    (
        "parameter shape missing",
        ir(BASE, (PARAM, PARAM.replace(' shape="2"', ""))),
        f"{LAYER_X}: missing attribute 'shape'",
    ),
    (
        "parameter bad shape",
        ir(BASE, (PARAM, PARAM.replace('"2"', '"2,x"'))),
        f"{LAYER_X}: bad shape '2,x': 'x' is not a dimension",
    ),
    (
        "parameter empty dim",
        ir(BASE, (PARAM, PARAM.replace('"2"', '"2,,3"'))),
        f"{LAYER_X}: bad shape '2,,3': empty dimension",
    ),
    (
        "parameter negative dim",
        ir(BASE, (PARAM, PARAM.replace('"2"', '"-2"'))),
        f"{LAYER_X}: bad shape '-2': negative dimension -2",
    ),
    (
        "parameter empty range",
        ir(BASE, (PARAM, PARAM.replace('"2"', '"5..3"'))),
        f"{LAYER_X}: bad shape '5..3': empty dimension range '5..3'",
    ),
    (
        "parameter bad range",
        ir(BASE, (PARAM, PARAM.replace('"2"', '"1..2..3"'))),
        f"{LAYER_X}: bad shape '1..2..3': '1..2..3' is not a dimension",
    ),
    (
        "parameter huge dim",
        ir(BASE, (PARAM, PARAM.replace('"2"', f'"{2**64}"'))),
        f"{LAYER_X}: bad shape '{2**64}': dimension {2**64} is larger than int64",
    ),
    (
        "parameter port type",
        ir(BASE, ('precision="FP32" names="x"', 'precision="FP16" names="x"')),
        f"{LAYER_X}: element_type f32 but output port 0 is f16",
    ),
    # Const
    ("const type unknown", ir(BASE, (CONST, CONST.replace("f32", "q7"))), f"{LAYER_W}: unknown element type 'q7'"),
    (
        "const dynamic shape",
        ir(BASE, (CONST, CONST.replace('"2"', '"?"'))),
        f"{LAYER_W}: bad shape '?': a Const shape must be static",
    ),
    (
        "const negative dim",
        ir(BASE, (CONST, CONST.replace('"2"', '"2,-5"'))),
        f"{LAYER_W}: bad shape '2,-5': negative dimension -5",
    ),
    (
        "const offset missing",
        ir(BASE, (CONST, CONST.replace(' offset="0"', ""))),
        f"{LAYER_W}: missing attribute 'offset'",
    ),
    (
        "const size not int",
        ir(BASE, (CONST, CONST.replace('"8"', '"8B"'))),
        f"{LAYER_W}: attribute 'size' is not an integer: '8B'",
    ),
    ("const negative offset", ir(BASE, (CONST, CONST.replace('"0"', '"-4"'))), f"{LAYER_W}: negative offset -4"),
    (
        "const outside bin",
        ir(BASE, (CONST, CONST.replace('"0"', '"4"'))),
        f"{LAYER_W}: data at offset 4 size 8 is outside the weights file {{tmp}}/model.bin (8 bytes)",
    ),
    (
        "const absurd shape",
        ir(BASE, (CONST, CONST.replace('"2"', '"100000,100000,100000"'))),
        f"{LAYER_W}: shape [100000, 100000, 100000] of f32 needs 4000000000000000 bytes, "
        "more than the weights file {tmp}/model.bin holds (8 bytes)",
    ),
    (
        "const huge empty shape",
        ir(BASE, (CONST, CONST.replace('"2"', f'"0,{2**62},{2**62}"').replace('"8"', '"0"'))),
        f"{LAYER_W}: empty shape [0, {2**62}, {2**62}] is too large for numpy",
    ),
    (
        "const size mismatch",
        ir(BASE, (CONST, CONST.replace('"8"', '"6"'))),
        f"{LAYER_W}: size 6 does not match shape [2] of f32 (8 bytes)",
    ),
    (
        "const packed size",
        ir(
            BASE,
            (CONST, CONST.replace('"f32" shape="2"', '"u4" shape="3"')),
            (
                'precision="FP32"><dim>2</dim></port></output>\n    </layer>\n    <layer id="2"',
                'precision="U4"><dim>3</dim></port></output>\n    </layer>\n    <layer id="2"',
            ),
        ),
        f"{LAYER_W}: size 8 does not match shape [3] of u4 (2 bytes)",
    ),
    (
        "const bad strings",
        ir(
            BASE,
            (CONST, CONST.replace("f32", "string")),
            (
                'precision="FP32"><dim>2</dim></port></output>\n    </layer>\n    <layer id="2"',
                'precision="STRING"><dim>2</dim></port></output>\n    </layer>\n    <layer id="2"',
            ),
        ),
        f"{LAYER_W}: cannot decode string data: it holds 1065353216 strings, the shape says 2",
    ),
    # edges
    (
        "edge attr missing",
        ir(BASE, (EDGE_W, '<edge from-layer="1" to-layer="2" to-port="1"/>')),
        f"{X}: edge #2: missing attribute 'from-port'",
    ),
    (
        "edge attr not int",
        ir(BASE, (EDGE_W, EDGE_W.replace('to-port="1"', 'to-port="one"'))),
        f"{X}: edge #2: attribute 'to-port' is not an integer: 'one'",
    ),
    (
        "edge to missing layer",
        ir(BASE, (EDGE_OUT, EDGE_OUT.replace('to-layer="3"', 'to-layer="9"'))),
        f"{X}: edge 2:2 -> 9:0: no layer with id 9",
    ),
    (
        "edge from missing port",
        ir(BASE, (EDGE_W, EDGE_W.replace('from-port="0"', 'from-port="5"'))),
        f"{X}: edge 1:5 -> 2:1: layer 'w' (id 1) has no output port 5",
    ),
    (
        "edge to missing port",
        ir(BASE, (EDGE_W, EDGE_W.replace('to-port="1"', 'to-port="7"'))),
        f"{X}: edge 1:0 -> 2:7: layer 'add' (id 2) has no input port 7",
    ),
    (
        "edge into output port",
        ir(BASE, (EDGE_W, EDGE_W.replace('to-port="1"', 'to-port="2"'))),
        f"{X}: edge 1:0 -> 2:2: layer 'add' (id 2) has no input port 2",
    ),
    (
        "two producers",
        ir(BASE, (EDGE_W, EDGE_W.replace('to-port="1"', 'to-port="0"'))),
        f"{LAYER_ADD}: input port 0 has two producers: layer 'x' (id 0) port 0 and layer 'w' (id 1) port 0",
    ),
    ("unconnected input", ir(BASE, (EDGE_W, "")), f"{LAYER_ADD}: input port 1 is not connected"),
    ("cycle", ir(CYCLE), f"{X}: the graph has a cycle: layer 'a' (id 1) -> layer 'b' (id 2) -> layer 'a' (id 1)"),
    (
        "self loop",
        ir(
            CYCLE,
            ('from-layer="2" from-port="1" to-layer="1"', 'from-layer="1" from-port="2" to-layer="1"'),
            ('from-layer="1" from-port="2" to-layer="2"', 'from-layer="0" from-port="0" to-layer="2"'),
        ),
        f"{X}: the graph has a cycle: layer 'a' (id 1) -> layer 'a' (id 1)",
    ),
    # bodies
    (
        "body type unknown",
        loop(('<data element_type="f32" shape="2" offset="9"', '<data element_type="f33" shape="2" offset="9"')),
        f"{BODY} body: layer 'bw' (id 1): unknown element type 'f33'",
    ),
    (
        "body const outside bin",
        loop(('offset="9" size="8"', 'offset="13" size="8"')),
        f"{BODY} body: layer 'bw' (id 1): data at offset 13 size 8 is outside the weights file "
        "{tmp}/model.bin (17 bytes)",
    ),
    (
        "body unconnected input",
        loop(
            (
                '<edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>\n          <edge from-layer="2"',
                '<edge from-layer="2"',
            )
        ),
        f"{BODY} body: layer 'badd' (id 2): input port 1 is not connected",
    ),
    (
        "body missing layer",
        loop(('<edge from-layer="4" from-port="0" to-layer="5"', '<edge from-layer="4" from-port="0" to-layer="6"')),
        f"{BODY} body: edge 4:0 -> 6:0: no layer with id 6",
    ),
    (
        "body cycle",
        loop(
            (
                '<edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>',
                '<edge from-layer="2" from-port="2" to-layer="2" to-port="0"/>',
            )
        ),
        f"{BODY} body: the graph has a cycle: layer 'badd' (id 2) -> layer 'badd' (id 2)",
    ),
    (
        "loop without body",
        ir('<net version="11"><layers><layer id="0" name="t" type="TensorIterator"/></layers></net>'),
        f"{X}: layer 't' (id 0): TensorIterator has no <body>",
    ),
    (
        "body without layers",
        loop(
            ("<body>\n        <layers>", "<body>\n        <nolayers>"),
            (
                '</layers>\n        <edges>\n          <edge from-layer="0"',
                '</nolayers>\n        <edges>\n          <edge from-layer="0"',
            ),
        ),
        f"{BODY} body: no <layers> element",
    ),
    ("nested too deep", ir(NESTED), f"{X}: loop bodies are nested more than 64 deep"),
    (
        "port map external",
        loop(('<input external_port_id="2"', '<input external_port_id="3"')),
        f"{BODY}: port_map input: external_port_id 3 is not an input port of the layer",
    ),
    (
        "port map internal",
        loop(
            (
                '<output external_port_id="3" internal_layer_id="3"/>',
                '<output external_port_id="3" internal_layer_id="8"/>',
            )
        ),
        f"{BODY}: port_map output: internal_layer_id 8 is not a layer of the body",
    ),
    (
        "port map not int",
        loop(('internal_layer_id="0"/>', 'internal_layer_id="first"/>')),
        f"{BODY}: port_map input: attribute 'internal_layer_id' is not an integer: 'first'",
    ),
    (
        "back edge missing layer",
        loop(('<edge from-layer="3" to-layer="0"/>', '<edge from-layer="3" to-layer="7"/>')),
        f"{BODY}: back edge #1: layer id 7 is not a layer of the body",
    ),
]


# A file missing or unreadable is an IRFileError (the CLI's exit code 2); the rest, plain IRErrors.
FILE_CASES = {
    "xml missing",
    "xml is a directory",
    "xml unreadable",
    "bin missing",
    "given bin missing",
    "bin unreadable",
}


@pytest.mark.parametrize(
    ("setup", "expected", "kind"),
    [(*c[1:], IRFileError if c[0] in FILE_CASES else IRError) for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_error_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setup: Setup, expected: str, kind: type[IRError]
) -> None:
    xml, bin_path = setup(tmp_path, monkeypatch)
    with pytest.raises(IRError) as info:
        read_ir(xml, bin_path)
    assert info.type is kind
    assert str(info.value) == expected.format(tmp=str(tmp_path))


@pytest.mark.parametrize(
    ("text", "bin_data"), [(BASE, BASE_BIN), (LOOP, LOOP_BIN), (BASE.replace('version="11"', 'version="10"'), BASE_BIN)]
)
def test_hand_written_irs_are_valid(tmp_path: Path, text: str, bin_data: bytes) -> None:
    """The bases the error cases break are themselves good IRs, for ortstate and for OpenVINO."""
    ov = pytest.importorskip("openvino")
    (tmp_path / "model.xml").write_text(text)
    (tmp_path / "model.bin").write_bytes(bin_data)
    graph = read_ir(tmp_path / "model.xml")
    model = ov.Core().read_model(str(tmp_path / "model.xml"))
    assert [p.name for p in graph.parameters] == [p.get_friendly_name() for p in model.get_parameters()]
    assert len(graph.layers) == len(model.get_ordered_ops())


@pytest.mark.parametrize(
    "text", [BILLION_LAUGHS, EXTERNAL_ENTITY, BILLION_LAUGHS.replace("<!DOCTYPE", "<!-- x -->\n<!DOCTYPE")]
)
def test_hostile_xml_is_refused_quickly(tmp_path: Path, text: str) -> None:
    (tmp_path / "model.xml").write_text(text)
    start = time.perf_counter()
    with pytest.raises(IRError, match="refused hostile XML"):
        read_ir(tmp_path / "model.xml")
    assert time.perf_counter() - start < 0.5


def _mutations(text: str, rng: random.Random) -> list[str]:
    """Damaged copies of ``text``: attribute values swapped for junk, elements and spans deleted, truncation."""
    junk = ["", "-1", "x", "0", "1e9", "999999999999999999999", "?", "...", "1..", "FP99", "opset0", "2,3", "-", "\\,"]
    out = []
    values = list(re.finditer(r'="([^"]*)"', text))
    for _ in range(150):
        m = rng.choice(values)
        out.append(text[: m.start(1)] + rng.choice(junk) + text[m.end(1) :])
    tags = list(re.finditer(r"<(port|dim|data|edge|layer|input|output|body|port_map|back_edges)\b[^>]*/?>", text))
    for _ in range(60):
        m = rng.choice(tags)
        out.append(text[: m.start()] + text[m.end() :])
    for _ in range(40):
        a = rng.randrange(len(text))
        out.append(text[:a] + text[a + rng.randrange(1, 40) :])
    out.extend(text[: rng.randrange(len(text))] for _ in range(20))
    return out


@pytest.mark.parametrize(("name", "text", "bin_data"), [("base", BASE, BASE_BIN), ("loop", LOOP, LOOP_BIN)])
def test_damaged_irs_raise_only_irerror(tmp_path: Path, name: str, text: str, bin_data: bytes) -> None:
    """Whatever the damage, read_ir either reads the IR or raises IRError: never another exception."""
    (tmp_path / "model.bin").write_bytes(bin_data)
    rng = random.Random(name)
    for index, damaged in enumerate(_mutations(text, rng)):
        (tmp_path / "model.xml").write_text(damaged)
        try:
            read_ir(tmp_path / "model.xml")
        except IRError as exc:
            assert type(exc) is IRError
            assert str(exc).startswith(str(tmp_path / "model.xml") + ": "), str(exc)
            assert "\n" not in str(exc), f"mutation {index}: multi-line message {exc}"
        except Exception as exc:  # noqa: BLE001 - the point is to catch anything else
            pytest.fail(f"mutation {index} raised {type(exc).__name__}: {exc}\n{damaged}")

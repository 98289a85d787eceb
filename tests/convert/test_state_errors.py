"""Variables the converter must refuse, each with a message naming the variable and layer."""

from __future__ import annotations

import re

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino import opset6
from openvino.op.util import Variable, VariableInfo
from oracle import save_ir

import ortstate


@pytest.fixture
def base_xml(tmp_path):
    """A valid IR (x -> ReadValue 'acc' -> Add -> Assign) whose text the cases below break."""
    x = ops.parameter([1, 3], np.float32, name="x")
    info = VariableInfo()
    info.data_shape = ov.PartialShape([1, 3])
    info.data_type = ov.Type.f32
    info.variable_id = "acc"
    var = Variable(info)
    rv = opset6.read_value(ops.constant(np.zeros((1, 3), np.float32)), var, name="rv")
    add = ops.add(rv, x, name="add")
    model = ov.Model([ops.result(add, name="out")], [opset6.assign(add, var, name="asg")], [x], "m")
    return save_ir(model, tmp_path, "m")


def _edit(xml, pattern, repl, count=1):
    text = xml.read_text()
    new = re.sub(pattern, repl, text, count=count)
    assert new != text, f"pattern {pattern!r} not found"
    xml.write_text(new)


def _layer(xml, op_type):
    """(id, name) of the first layer of ``op_type``."""
    return re.search(rf'<layer id="(\d+)" name="([^"]+)" type="{op_type}"', xml.read_text()).groups()


def test_read_without_assign(base_xml):
    lid, name = _layer(base_xml, "Assign")
    _edit(base_xml, r'(type="Assign" version="opset6">\s*<data variable_id=)"acc"', r'\1"other"')
    with pytest.raises(ortstate.StateError) as err:
        ortstate.convert(base_xml)
    assert (
        str(err.value) == f"{base_xml}: layer '{name}' (id {lid}, Assign-6): "
        "variable 'other' is assigned but never read (no ReadValue)"
    )


def test_assign_without_read(base_xml):
    lid, name = _layer(base_xml, "ReadValue")
    _edit(base_xml, r'(type="ReadValue" version="opset6">\s*<data variable_id=)"acc"', r'\1"lonely"')
    with pytest.raises(ortstate.StateError) as err:
        ortstate.convert(base_xml)
    # The Assign of 'acc' is reported first: it has no ReadValue now.
    alid, aname = _layer(base_xml, "Assign")
    assert (
        str(err.value) == f"{base_xml}: layer '{aname}' (id {alid}, Assign-6): "
        "variable 'acc' is assigned but never read (no ReadValue)"
    )


def test_assign_type_mismatch(base_xml):
    lid, name = _layer(base_xml, "ReadValue")
    _edit(
        base_xml,
        r'(name="rv" type="ReadValue" version="opset6">\s*<data variable_id="acc" variable_type=)"f32"',
        r'\1"i32"',
    )
    with pytest.raises(ortstate.StateError) as err:
        ortstate.convert(base_xml)
    assert str(err.value) == (
        f"{base_xml}: layer '{name}' (id {lid}, ReadValue-6): variable 'acc': "
        "variable_type i32 does not relax the init value's type f32"
    )


def test_variable_shape_does_not_relax_init(base_xml):
    lid, name = _layer(base_xml, "ReadValue")
    _edit(base_xml, r'variable_shape="1,3"', 'variable_shape="1,4"')
    with pytest.raises(ortstate.StateError) as err:
        ortstate.convert(base_xml)
    assert str(err.value) == (
        f"{base_xml}: layer '{name}' (id {lid}, ReadValue-6): variable 'acc': "
        "variable_shape [1,4] does not relax the init value's shape [1,3]"
    )


def test_two_assigns(base_xml):
    """A second Assign of the same variable, added as a copy of the first."""
    asg, name = _layer(base_xml, "Assign")
    text = base_xml.read_text()
    layer = re.search(r'(\t\t<layer id="\d+" name="[^"]+" type="Assign".*?</layer>\n)', text, re.S).group(1)
    copy = re.sub(r'id="\d+" name="[^"]+"', 'id="900" name="asg2"', layer, count=1)
    edge = re.search(
        r'(\t\t<edge from-layer="\d+" from-port="\d+" to-layer="' + asg + r'" to-port="0" />\n)', text
    ).group(1)
    text = text.replace(layer, layer + copy).replace(edge, edge + re.sub(r'to-layer="\d+"', 'to-layer="900"', edge))
    base_xml.write_text(text)
    with pytest.raises(ortstate.StateError) as err:
        ortstate.convert(base_xml)
    assert str(err.value) == (
        f"{base_xml}: layer 'asg2' (id 900, Assign-6): "
        f"variable 'acc' has two Assign layers ('{name}' id {asg} and 'asg2' id 900)"
    )


@pytest.mark.parametrize("port_too", [False, True], ids=["value", "value-and-port"])
@pytest.mark.parametrize("explicit", [False, True])
def test_assign_value_of_another_type(tmp_path, explicit, port_too):
    """An i32 value wired into an f32 variable's Assign (the Assign's own port precision may still say
    f32): refused at conversion, not by onnxruntime when it loads the model."""
    x = ops.parameter([3], np.int32, name="x")
    info = VariableInfo()
    info.data_shape = ov.PartialShape([3])
    info.data_type = ov.Type.f32
    info.variable_id = "acc"
    var = Variable(info)
    as_f32 = ops.convert(x, "f32", name="as_f32")
    rv = opset6.read_value(var, name="rv")
    asg = opset6.assign(as_f32, var)
    asg.set_friendly_name("asg")
    model = ov.Model([ops.result(ops.add(rv, as_f32))], [asg], [x], "m")
    xml = save_ir(model, tmp_path, "m")
    xid, _ = _layer(xml, "Parameter")
    cid, _ = _layer(xml, "Convert")
    lid, name = _layer(xml, "Assign")
    _edit(
        xml,
        rf'<edge from-layer="{cid}" from-port="1" to-layer="{lid}"',
        f'<edge from-layer="{xid}" from-port="0" to-layer="{lid}"',
    )
    if port_too:
        _edit(
            xml,
            r'(type="Assign" version="opset6">\s*<data variable_id="acc" />\s*<input>\s*<port id="0" precision=)"FP32"',
            r'\1"I32"',
        )
    with pytest.raises(ortstate.StateError) as err:
        ortstate.convert(xml, explicit_state=explicit)
    assert (
        str(err.value)
        == f"{xml}: layer '{name}' (id {lid}, Assign-6): variable 'acc': Assign writes i32 but the variable is f32"
    )

"""``convert/driver.py``: the walk that writes one ONNX model: unsupported ops reported at once,
inputs and outputs named as OpenVINO names them, the opsets the nodes need."""

from __future__ import annotations

import numpy as np
import onnx
import openvino as ov
import openvino.opset13 as ops
import pytest
from oracle import single_op
from quantized_weights import chain

from ortstate.convert.driver import ONNX_IR_VERSION, build, unsupported_ops
from ortstate.errors import ConversionError, UnsupportedOpsError
from ortstate.ir import read_ir


def _two_relus(tmp_path):
    x = ops.parameter([2], np.float32, name="x")
    y = ops.parameter([2], np.float32, name="y")
    return single_op(tmp_path, [ops.relu(x, name="r"), ops.relu(y, name="s"), y], [x, y])


def _edited(xml, old, new):
    text = xml.read_text()
    assert old in text
    xml.write_text(text.replace(old, new))
    return read_ir(xml)


def test_every_unsupported_layer_is_reported_in_one_error(tmp_path):
    graph = _edited(_two_relus(tmp_path), 'type="ReLU"', 'type="Frobnicate"')
    ids = {layer.name: layer.id for layer in graph.topological()}
    listed = sorted([f"'r' id {ids['r']}", f"'s' id {ids['s']}"], key=lambda d: int(d.rsplit(" ", 1)[1]))
    assert unsupported_ops(graph) == {"Frobnicate-1": listed}  # in the IR's order
    with pytest.raises(UnsupportedOpsError) as raised:
        build(graph)
    assert str(raised.value) == f"{graph.source}: unsupported operations: Frobnicate-1 ({', '.join(listed)})"


def test_inputs_and_outputs_keep_openvinos_names(tmp_path):
    x = ops.parameter([2], np.float32, name="x")
    relu = ops.relu(x, name="r")
    graph = read_ir(single_op(tmp_path, [relu, relu, x], [x]))
    model = build(graph).model
    name = graph.result_name(graph.results[0])
    assert [i.name for i in model.graph.input] == ["x"]
    assert [o.name for o in model.graph.output] == [name, f"{name}_1", "x"]
    # The Relu's output takes its Result's name; a second Result of it gets an Identity named
    # apart; an input is an output as it is.
    assert [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node] == [
        ("Relu", ["x"], [name]),
        ("Identity", [name], [f"{name}_1"]),
    ]
    assert (model.ir_version, model.producer_name) == (ONNX_IR_VERSION, "ortstate")
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 21)]


def test_an_input_name_used_twice_is_refused_naming_the_layer(tmp_path):
    graph = _edited(_two_relus(tmp_path), 'names="y"', 'names="x"')
    y = next(layer for layer in graph.parameters if layer.name == "y")
    with pytest.raises(ConversionError) as raised:
        build(graph)
    assert str(raised.value) == f"{graph.source}: {y.describe()}: input name 'x' is used twice"


def test_compressed_weights_bring_their_domain_and_their_report(tmp_path):
    """Here the contrib op is only inside the split's ``If``: the model imports its domain all the same."""
    x = ops.parameter([1, 32], np.float32, name="x")
    codes = (np.arange(4 * 32) % 16).astype(np.uint8).reshape(4, 2, 16)
    weight = chain(codes, np.full((4, 2, 1), 0.5), None, ov.Type.u4, "w")
    built = build(read_ir(single_op(tmp_path, ops.matmul(x, weight, False, True), [x])))
    assert [(o.domain, o.version) for o in built.model.opset_import] == [("", 21), ("com.microsoft", 1)]
    keys = [e.key for e in built.model.metadata_props]
    assert "ortstate.weights" in keys and "ortstate.attention" not in keys
    assert built.arrays == {}  # nothing above the size kept outside the protobuf
    onnx.checker.check_model(built.model)

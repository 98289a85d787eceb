"""``convert/translate.py``: one IR layer into ONNX nodes (or a folded constant, or nothing for a
compressed weight), and a loop body; errors name the layer."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from oracle import single_op
from quantized_weights import chain

from ortstate.convert import translate
from ortstate.convert.builder import GraphBuilder
from ortstate.convert.compressed import CompressedInput
from ortstate.convert.context import Context
from ortstate.errors import ConversionError, StateError
from ortstate.ir import read_ir


def _setup(tmp_path, out, params):
    graph = read_ir(single_op(tmp_path, out, params))
    ctx = Context(graph, GraphBuilder("g"))
    values = {(p.id, p.outputs[0].id): p.tensor_name() for p in graph.parameters}

    def value_of(layer, index):
        return translate.input_value(graph, values, layer, index)

    return graph, ctx, values, value_of


def _layer(graph, name):
    return next(layer for layer in graph.layers.values() if layer.name == name)


def _translate_all(graph, ctx, values, value_of):
    for layer in graph.topological():
        if layer.type not in ("Parameter", "Result"):
            translate.translate_layer(layer, ctx, values, value_of)


def test_a_layer_becomes_its_nodes_each_tagged_with_the_layer(tmp_path):
    x = ops.parameter([2], np.float32, name="x")
    graph, ctx, values, value_of = _setup(tmp_path, ops.relu(x, name="r"), [x])
    relu = _layer(graph, "r")
    translate.translate_layer(relu, ctx, values, value_of)
    assert [(n.op_type, list(n.input), n.doc_string) for n in ctx.b.nodes] == [("Relu", ["x"], relu.describe())]
    assert values[(relu.id, relu.outputs[0].id)] == ctx.b.nodes[0].output[0]


def test_bf16_results_are_rounded_as_openvinos_bf16_math_does(tmp_path):
    x = ops.parameter([2], ov.Type.bf16, name="x")
    graph, ctx, values, value_of = _setup(tmp_path, ops.exp(x, name="e"), [x])
    translate.translate_layer(_layer(graph, "e"), ctx, values, value_of)
    assert [n.op_type for n in ctx.b.nodes] == ["Exp", "Cast", "Cast"]


def test_constant_chains_fold_and_an_f16_weight_is_widened_by_a_cast(tmp_path):
    x = ops.parameter([1, 32], np.float32, name="x")
    big = ops.convert(ops.constant(np.ones((32, 32), np.float16)), "f32", name="f16")
    folded = ops.multiply(ops.constant(np.ones((1, 32), np.float32)), ops.constant(np.float32(3)), name="three")
    graph, ctx, values, value_of = _setup(tmp_path, ops.add(ops.matmul(x, big, False, False), folded), [x])
    _translate_all(graph, ctx, values, value_of)
    assert [n.op_type for n in ctx.b.nodes] == ["Cast", "MatMul", "Add"]
    three = _layer(graph, "three")
    initializers = {t.name: t for t in ctx.b.initializers}
    assert values[(three.id, three.outputs[0].id)] == "three" and list(initializers["three"].dims) == [1, 32]
    assert [(r.layer, r.how) for r in ctx.weights] == [("f16", "float16 initializer + Cast")]


def test_a_quantized_weight_has_no_value_of_its_own(tmp_path):
    x = ops.parameter([1, 32], np.float32, name="x")
    codes = (np.arange(4 * 32) % 16).astype(np.uint8).reshape(4, 2, 16)
    weight = chain(codes, np.full((4, 2, 1), 0.5), None, ov.Type.u4, "w")
    graph, ctx, values, value_of = _setup(tmp_path, ops.matmul(x, weight, False, True, name="mm"), [x])
    w = _layer(graph, "w")
    translate.translate_layer(w, ctx, values, value_of)
    marker = values[(w.id, w.outputs[0].id)]
    assert isinstance(marker, CompressedInput) and marker == "ortstate.compressed:w"
    assert ctx.b.nodes == [] and ctx.b.initializers == []


def _failing(exc):
    def translator(node, ctx):
        raise exc

    return translator


@pytest.mark.parametrize(
    ("translator", "message"),
    [
        (_failing(IndexError("list index out of range")), "cannot translate the layer as written (IndexError: list "
         "index out of range)"),
        (lambda node, ctx: ["a", "b"], "translator produced 2 outputs, expected 1"),
    ],
)  # fmt: skip
def test_a_translator_failing_is_the_layers_error(tmp_path, monkeypatch, translator, message):
    x = ops.parameter([2], np.float32, name="x")
    graph, ctx, values, value_of = _setup(tmp_path, ops.relu(x, name="r"), [x])
    monkeypatch.setattr(translate, "translator_for", lambda op_type, version: translator)
    relu = _layer(graph, "r")
    with pytest.raises(ConversionError) as raised:
        translate.translate_layer(relu, ctx, values, value_of)
    assert str(raised.value) == f"{graph.source}: {relu.describe()}: {message}"
    ours = StateError("a variable went wrong")
    monkeypatch.setattr(translate, "translator_for", lambda op_type, version: _failing(ours))
    with pytest.raises(StateError) as raised:
        translate.translate_layer(relu, ctx, values, value_of)
    assert raised.value is ours  # ortstate's own errors pass unchanged


def test_a_shape_no_tensor_can_have_is_refused_naming_the_constant(tmp_path):
    x = ops.parameter([1], np.float32, name="x")
    dims = ops.constant(np.array([1 << 41, 0], np.int64), name="dims")
    graph, ctx, values, value_of = _setup(tmp_path, ops.broadcast(x, dims, name="b"), [x])
    layer, const = _layer(graph, "b"), _layer(graph, "dims")
    with pytest.raises(ConversionError) as raised:
        translate.translate_layer(layer, ctx, values, value_of)
    assert str(raised.value) == (
        f"{graph.source}: {layer.describe()}: input 1 takes dim {1 << 41} from layer 'dims' (id {const.id}); "
        f"no tensor can have a dim above {1 << 40}"
    )


def test_reading_a_layer_without_a_value_names_both_layers(tmp_path):
    x = ops.parameter([2], np.float32, name="x")
    graph, _, _, _ = _setup(tmp_path, ops.relu(x, name="r"), [x])
    relu, param = _layer(graph, "r"), _layer(graph, "x")
    with pytest.raises(ConversionError) as raised:
        translate.input_value(graph, {}, relu, 0)
    assert str(raised.value) == (
        f"{graph.source}: {relu.describe()}: input 0 comes from {param.describe()}, which has no value"
    )


def test_a_body_translates_from_its_parameters_to_its_results(tmp_path):
    x = ops.parameter([2], np.float32, name="x")
    graph = read_ir(single_op(tmp_path, ops.relu(x, name="r"), [x]))
    b = GraphBuilder("body")
    (param,) = graph.parameters
    outs = translate.translate_body(graph, b, {param.id: "outer_x"})
    assert [(n.op_type, list(n.input)) for n in b.nodes] == [("Relu", ["outer_x"])]
    assert list(outs.values()) == [b.nodes[0].output[0]]
    with pytest.raises(ConversionError) as raised:
        translate.translate_body(graph, GraphBuilder("body"), {})
    assert str(raised.value) == f"{graph.source}: body {param.describe()} is not connected by the port map"


def test_tag_keeps_a_description_a_node_already_has(tmp_path):
    x = ops.parameter([2], np.float32, name="x")
    graph = read_ir(single_op(tmp_path, ops.relu(x, name="r"), [x]))
    b = GraphBuilder("g")
    b.op("Relu", ["x"])
    b.op("Neg", ["x"])
    b.nodes[0].doc_string = "fused"
    translate.tag(b.nodes, _layer(graph, "r"))
    assert [n.doc_string for n in b.nodes] == ["fused", _layer(graph, "r").describe()]

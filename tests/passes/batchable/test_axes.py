"""``passes/batchable/axes.py``: the batch followed through the graph by shape inference, to every
output and variable; where a constant pins it, the refusal names the layer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from batchable_models import F32, accumulator
from onnx import helper, numpy_helper

from ortstate.errors import OrtStateError
from ortstate.passes.batchable.axes import find_axes, infer_dims, layer_of, light_copy
from ortstate.passes.batchable.relax import relax_batch


def test_the_batch_reaches_every_output_and_variable() -> None:
    model, meta = accumulator()
    relax_batch(model, meta)
    axes = find_axes(model, meta, "m.onnx")
    assert (dict(axes.inputs), dict(axes.outputs), dict(axes.states)) == ({"x": 0}, {"y": 0, "h_out": 0}, {"h": 0})


def test_a_transposed_state_has_its_batch_on_its_own_axis() -> None:
    """h [4, batch]: its next value is Transpose(y); the variable's batch axis is 1."""
    model, meta = accumulator()
    graph = model.graph
    graph.node[0].input[1] = "h_t"
    graph.node.insert(0, helper.make_node("Transpose", ["h_in"], ["h_t"], name="in_t", perm=[1, 0]))
    graph.node[-1].CopyFrom(helper.make_node("Transpose", ["y"], ["h_out"], name="out_t", perm=[1, 0]))
    for value in (graph.input[1], graph.output[1]):
        value.CopyFrom(helper.make_tensor_value_info(value.name, F32, [4, 1]))
    var = meta.variables[0]
    meta = type(meta)(form=meta.form, variables=(type(var)(**{**var.__dict__, "shape": [4, 1]}),))
    relax_batch(model, meta)
    axes = find_axes(model, meta, "m.onnx")
    assert (dict(axes.outputs), dict(axes.states)) == ({"y": 0, "h_out": 1}, {"h": 1})


def test_a_constant_that_pins_the_batch_is_named() -> None:
    model, meta = accumulator(pin=True)
    relax_batch(model, meta)
    with pytest.raises(OrtStateError) as caught:
        find_axes(model, meta, "m.onnx")
    assert str(caught.value) == (
        "m.onnx: cannot batch streams: the batch of the inputs is lost at layer 'r' (id 3, Reshape-1): its output "
        "'h_out' is [1, 4] on the way to output 'h_out' ([1, 4]); a constant pins the batch there or its shape is "
        "not known"
    )


def test_light_copy_leaves_large_initializers_out_and_the_model_alone() -> None:
    model, _ = accumulator()
    big = numpy_helper.from_array(np.zeros((64, 64), np.float32), "big")
    model.graph.initializer.append(big)
    before = model.SerializeToString()
    light = light_copy(model)
    assert model.SerializeToString() == before
    assert [t.name for t in light.graph.initializer] == []
    assert "big" in [i.name for i in light.graph.input]
    assert infer_dims(light)["y"] == (1, 4)


def test_layer_of_reads_the_converters_doc_string() -> None:
    node = onnx.helper.make_node("Relu", ["a"], ["b"], name="n", doc_string="layer 'r' (id 3, Reshape-1)")
    assert layer_of(node) == "layer 'r' (id 3, Reshape-1)"
    assert layer_of(onnx.helper.make_node("Relu", ["a"], ["b"], name="n")) == "node 'n' (Relu)"

"""``convert/builder.py``: the tape translators write into: value names, nodes, constants."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortstate.convert.builder import GraphBuilder, Names
from ortstate.convert.external import LARGE_BYTES, is_stub


def test_names_are_unique_across_a_graph_and_its_subgraphs():
    names = Names()
    assert [names.fresh("a"), names.fresh("a"), names.fresh("a"), names.fresh("")] == ["a", "a_1", "a_2", "v"]
    names.reserve("b")
    assert names.taken("b") and names.fresh("b") == "b_1"
    b = GraphBuilder("g", names)
    child = b.sub("body")
    assert child.names is names
    assert b.op("Relu", ["x"]) == "Relu:Relu" and child.op("Relu", ["x"]) == "Relu:Relu_1"
    child.op("MatMulNBits", ["a", "b"], domain="com.microsoft")
    assert b.domains == {"com.microsoft"}  # the model imports what its subgraphs use


def test_op_names_values_after_the_layer_and_records_domains():
    b = GraphBuilder("g", hint="layer")
    one = b.op("Relu", ["x"])
    two = b.op("Split", [one], {"axis": 0, "num_outputs": 2}, outputs=2)
    named = b.op("Identity", [two[0]], names=["out"])
    custom = b.op("MatMulNBits", ["a", "b"], {"K": 16}, domain="com.microsoft")
    assert (one, two, named, custom) == ("layer:Relu", ["layer:Split", "layer:Split_1"], ["out"], "layer:MatMulNBits")
    assert [(n.op_type, n.name, list(n.input), n.domain) for n in b.nodes] == [
        ("Relu", "layer/Relu", ["x"], ""),
        ("Split", "layer/Split", ["layer:Relu"], ""),
        ("Identity", "layer/Identity", ["layer:Split"], ""),
        ("MatMulNBits", "layer/MatMulNBits", ["a", "b"], "com.microsoft"),
    ]
    assert b.domains == {"com.microsoft"}


def test_small_identical_constants_are_shared_large_ones_are_not():
    b = GraphBuilder("g")
    one = b.const(np.array([1, 2], np.int64), hint="shape")
    assert b.const(np.array([1, 2], np.int64), hint="other") == one == "shape"
    assert b.const(np.array([1, 2], np.int32), hint="shape") == "shape_1"  # another dtype
    big = np.zeros(65, np.float32)
    assert b.const(big, hint="big") != b.const(big, hint="big")
    assert [t.name for t in b.initializers] == ["shape", "shape_1", "big", "big_1"]
    assert numpy_helper.to_array(b.initializers[0]).tolist() == [1, 2]


def test_large_initializers_stay_arrays_behind_stubs_and_lazy_ones_are_made_late():
    b = GraphBuilder("g", keep_large=True)
    made = []

    def make():
        made.append(1)
        return np.ones(LARGE_BYTES, np.uint8)

    array = np.zeros(LARGE_BYTES // 4, np.float32)
    name = b.const(array, hint="w")
    lazy = b.lazy_const([LARGE_BYTES], np.uint8, make, hint="codes")
    assert b.large[name] is array and is_stub(b.initializers[0]) and is_stub(b.initializers[1])
    assert made == [] and b.large[lazy]().sum() == LARGE_BYTES and made == [1]
    small = b.lazy_const([2], np.uint8, lambda: np.array([7, 8], np.uint8), hint="small")  # made at once
    assert numpy_helper.to_array(b.initializers[-1]).tolist() == [7, 8] and small not in b.large


@pytest.mark.parametrize(
    ("elem_type", "dtype", "ops"),
    [
        (TensorProto.FLOAT, np.float32, ["Where"]),
        (TensorProto.BOOL, np.bool_, ["Cast", "Cast", "Where", "Cast"]),  # through uint8
        (TensorProto.UINT64, np.uint64, ["Cast", "Sub", "Mul", "Add"]),  # y + (x - y) * cond
    ],
)
def test_where_works_for_types_onnxruntime_has_no_where_for(elem_type, dtype, ops):
    b = GraphBuilder("g")
    for name, etype in (("c", TensorProto.BOOL), ("x", elem_type), ("y", elem_type)):
        b.add_input(name, etype, [3])
    out = b.where("c", "x", "y", elem_type)
    assert [n.op_type for n in b.nodes] == ops
    b.add_output(out, elem_type, [3])
    model = helper.make_model(b.graph(), opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x, y = np.array([1, 0, 2**63 + 5]).astype(dtype), np.array([3, 1, 4]).astype(dtype)
    (got,) = session.run(None, {"c": np.array([True, False, True]), "x": x, "y": y})
    assert got.tolist() == [x[0], y[1], x[2]]


def test_rename_all_renames_every_use_and_definition():
    b = GraphBuilder("g")
    a = b.op("Relu", ["x"])
    b.op("Neg", [a])
    b.rename_all({a: "renamed"})
    assert [(list(n.input), list(n.output)) for n in b.nodes] == [(["x"], ["renamed"]), (["renamed"], ["Neg:Neg"])]

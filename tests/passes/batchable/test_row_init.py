"""``passes/batchable/row_init.py``: a variable's init flag made one per row, so streams start one
by one in a batch: the init computed once for the batch, taken only in the starting streams' rows."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from batchable_models import F32, run, variable
from onnx import TensorProto, helper

from ortstate.errors import OrtStateError
from ortstate.meta import EXPLICIT, ModelMeta
from ortstate.passes.batchable.row_init import BATCH_PARAM, rows_init


def _guarded(extra_reader: bool = False) -> tuple[onnx.ModelProto, ModelMeta]:
    """h = If(flag, x * 2 (the computed init), h_in); y = h + x, the variable's next value."""
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["init"], name="double")],
        "then",
        [],
        [helper.make_tensor_value_info("init", F32, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["h_in"], ["kept"], name="keep")],
        "else",
        [],
        [helper.make_tensor_value_info("kept", F32, None)],
    )
    nodes = [
        helper.make_node("If", ["flag"], ["h"], name="guard", then_branch=then, else_branch=other),
        helper.make_node("Add", ["h", "x"], ["y"], name="add"),
        helper.make_node("Identity", ["y"], ["h_out"], name="next"),
    ]
    outputs = [helper.make_tensor_value_info("y", F32, ["B", 4]), helper.make_tensor_value_info("h_out", F32, ["B", 4])]
    if extra_reader:
        nodes.append(helper.make_node("Not", ["flag"], ["not_flag"], name="not"))
        outputs.append(helper.make_tensor_value_info("not_flag", TensorProto.BOOL, []))
    graph = helper.make_graph(
        nodes,
        "guarded",
        [
            helper.make_tensor_value_info("x", F32, ["B", 4]),
            helper.make_tensor_value_info("h_in", F32, ["B", 4]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        outputs,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, ModelMeta(form=EXPLICIT, variables=(variable(init_flag="flag", init="computed"),))


def test_the_flag_is_one_per_row_and_only_starting_rows_take_the_init() -> None:
    model, meta = _guarded()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    h = np.full((2, 4), 100, np.float32)
    (before, _) = run(model, {"x": x, "h_in": h, "flag": np.array(True)})
    np.testing.assert_array_equal(before, 3 * x)  # the scalar flag: both rows start
    new_meta, flags = rows_init(model, meta, {"h": 0}, "m.onnx")
    assert flags == {"h": "flag"} and new_meta.variables[0].init_flag is None
    assert [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node] == [
        ("Cast", ["flag"], ["guard/pool_flags_int"]),
        ("ReduceMax", ["guard/pool_flags_int"], ["guard/pool_flags_max"]),
        ("Cast", ["guard/pool_flags_max"], ["guard/pool_any"]),
        ("If", ["guard/pool_any"], ["h"]),
        ("Add", ["h", "x"], ["y"]),
        ("Identity", ["y"], ["h_out"]),
    ]
    then = next(a.g for a in model.graph.node[3].attribute if a.name == "then_branch")
    assert [(n.op_type, list(n.input), list(n.output)) for n in then.node] == [
        ("Add", ["x", "x"], ["init"]),
        ("Constant", [], ["guard/pool_rows_axes"]),
        ("Unsqueeze", ["flag", "guard/pool_rows_axes"], ["guard/pool_rows"]),
        ("Where", ["guard/pool_rows", "init", "h_in"], ["guard/pool_init"]),
    ]
    flag = model.graph.input[2]
    assert [d.dim_param for d in flag.type.tensor_type.shape.dim] == [BATCH_PARAM]
    y, h_out = run(model, {"x": x, "h_in": h, "flag": np.array([True, False])})
    np.testing.assert_array_equal(y, [3 * x[0], h[1] + x[1]])  # row 0 starts, row 1 goes on
    np.testing.assert_array_equal(h_out, y)
    (none, _) = run(model, {"x": x, "h_in": h, "flag": np.array([False, False])})
    np.testing.assert_array_equal(none, h + x)


def test_a_flag_another_node_reads_is_refused_before_anything_changes() -> None:
    model, meta = _guarded(extra_reader=True)
    before = model.SerializeToString()
    with pytest.raises(OrtStateError) as caught:
        rows_init(model, meta, {"h": 0}, "m.onnx")
    assert str(caught.value) == (
        "m.onnx: variable 'h': its init flag is read by other nodes than one If, so streams cannot start one by one "
        "in a batch"
    )
    assert model.SerializeToString() == before

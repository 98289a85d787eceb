"""``passes/batchable/row_index.py``: the inputs whose values index rows of a state along its batch
axis (the beam reorder's ``beam_idx``), not those that only give it a shape."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from ortstate.passes.batchable.row_index import row_index_inputs


def _graph(axis: int, through_shape: bool = False) -> onnx.GraphProto:
    """h_in [B, 4] gathered along ``axis`` by beam_idx (or, ``through_shape``, by a range as long
    as beam_idx: its shape only)."""
    index = "beam_idx"
    nodes = []
    if through_shape:
        nodes = [
            helper.make_node("Shape", ["beam_idx"], ["n"]),
            helper.make_node("Squeeze", ["n"], ["n0"]),
            helper.make_node("Range", ["zero", "n0", "one"], ["rows"]),
        ]
        index = "rows"
    nodes += [
        helper.make_node("Cast", [index], ["idx"], to=TensorProto.INT64),
        helper.make_node("Gather", ["h_in", "idx"], ["picked"], axis=axis),
        helper.make_node("Add", ["picked", "x"], ["y"]),
    ]
    return helper.make_graph(
        nodes,
        "reorder",
        [
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["B", 4]),
            helper.make_tensor_value_info("beam_idx", TensorProto.INT32, ["B"]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4]),
            helper.make_tensor_value_info("zero", TensorProto.INT64, []),
            helper.make_tensor_value_info("one", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )


def test_an_input_gathering_rows_of_a_state_along_its_batch_axis_indexes_rows() -> None:
    assert row_index_inputs(_graph(0), {"h_in": 0}, {"beam_idx", "x"}) == {"beam_idx"}


def test_a_gather_along_another_axis_or_of_another_value_does_not() -> None:
    assert row_index_inputs(_graph(1), {"h_in": 0}, {"beam_idx", "x"}) == set()
    assert row_index_inputs(_graph(0), {"other": 0}, {"beam_idx", "x"}) == set()


def test_an_input_read_only_for_its_shape_does_not() -> None:
    assert row_index_inputs(_graph(0, through_shape=True), {"h_in": 0}, {"beam_idx", "x", "zero"}) == {"zero"}

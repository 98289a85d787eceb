"""What shape inference is told to follow the batch through loop bodies: slices of run-time bounds
keep the dims they do not slice, and a loop-carried value gets its initial value's shape only when
the body gives it back with that very shape. Checked against ONNX Runtime's own output shapes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortstate.passes.batchable.axes import infer_dims, light_copy


def _const(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _loop_model(grows: bool) -> onnx.ModelProto:
    """x [B, T, 4]; a Loop over T carries h [B, 4]: h + x[:, t] (same shape every iteration) or,
    with ``grows``, Concat(h, x[:, t]) along axis 1 (4 wider each iteration)."""
    body_nodes = [
        helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
        helper.make_node("Add", ["start", "one"], ["end"]),
        helper.make_node("Slice", ["x", "start", "end", "one"], ["step"]),  # x[:, t:t+1]: run-time bounds
        helper.make_node("Squeeze", ["step", "one"], ["row"]),
        helper.make_node("Concat", ["h", "row"], ["h_next"], axis=1)
        if grows
        else helper.make_node("Add", ["h", "row"], ["h_next"]),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_next", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("step", TensorProto.FLOAT, None),
        ],
        [_const("zero", 0), _const("one", 1)],
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["t"], start=1, end=2),
        helper.make_node("Squeeze", ["t"], ["trips"]),
        helper.make_node("Loop", ["trips", "", "h0"], ["h_last", "steps"], body=body),
    ]
    graph = helper.make_graph(
        nodes,
        "loop",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", 4]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["B", 4]),
        ],
        [
            helper.make_tensor_value_info("h_last", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("steps", TensorProto.FLOAT, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("grows", [False, True])
def test_loop_bodies_are_followed_only_where_the_shape_holds(grows: bool) -> None:
    model = _loop_model(grows)
    dims = infer_dims(light_copy(model))
    assert dims["row"] == ("B", 4)  # the run-time slice keeps the batch
    steps = dims["steps"]  # the scan output: [iterations, B, the slice's run-time length, 4]
    assert len(steps) == 4 and steps[1] == "B" and steps[3] == 4
    assert dims.get("h_last") == (None if grows else ("B", 4))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    h_last, steps = session.run(None, {"x": np.ones((2, 3, 4), np.float32), "h0": np.zeros((2, 4), np.float32)})
    assert h_last.shape == ((2, 16) if grows else (2, 4)) and steps.shape == (3, 2, 1, 4)

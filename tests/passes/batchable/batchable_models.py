"""Small stateful models in the explicit form for the batchable passes' tests."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ortstate.meta import EXPLICIT, ModelMeta, VariableMeta

F32 = TensorProto.FLOAT


def variable(init_flag: str | None = None, shape: list | None = None, init: str = "zeros") -> VariableMeta:
    return VariableMeta(
        id="h",
        element_type="f32",
        dtype="float32",
        shape=[1, 4] if shape is None else shape,
        init=init,
        init_shape=[1, 4],
        init_flag=init_flag,
        state_input="h_in",
        state_output="h_out",
        carrier="float32",
    )


def accumulator(pin: bool = False) -> tuple[onnx.ModelProto, ModelMeta]:
    """y = x + h; the variable's next value y (with ``pin``: through a Reshape to a constant
    ``[1, 4]``, as an IR layer wrote it)."""
    nodes = [helper.make_node("Add", ["x", "h_in"], ["y"], name="add")]
    inits = []
    if pin:
        nodes.append(
            helper.make_node("Reshape", ["y", "to"], ["h_out"], name="r", doc_string="layer 'r' (id 3, Reshape-1)")
        )
        inits.append(numpy_helper.from_array(np.array([1, 4], np.int64), "to"))
    else:
        nodes.append(helper.make_node("Identity", ["y"], ["h_out"], name="next"))
    graph = helper.make_graph(
        nodes,
        "acc",
        [helper.make_tensor_value_info("x", F32, [1, 4]), helper.make_tensor_value_info("h_in", F32, [1, 4])],
        [helper.make_tensor_value_info("y", F32, [1, 4]), helper.make_tensor_value_info("h_out", F32, [1, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, ModelMeta(form=EXPLICIT, variables=(variable(),))


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

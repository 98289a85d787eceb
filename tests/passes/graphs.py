"""Hand-built graphs for the pass tests, and running them in ONNX Runtime before and after a pass."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT


def value(name: str, dims: Sequence[int | str] | None, elem: int = F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def const(name: str, array: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """All outputs, in a session without ONNX Runtime's own graph optimizations (so the graph given
    is the graph run)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def ops(m: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in m.graph.node)


def same_outputs(before: onnx.ModelProto, after: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> None:
    """``after`` gives bit for bit what ``before`` gave, for every feed (the pass is exact)."""
    onnx.checker.check_model(after, full_check=True)
    for feed in feeds:
        for want, got in zip(run(before, feed), run(after, feed), strict=True):
            assert want.dtype == got.dtype and want.shape == got.shape
            np.testing.assert_array_equal(got, want)

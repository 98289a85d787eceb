"""Weight-decompression chains fold to f32 initializers, decompressed in f32 as OpenVINO's CPU does."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from oracle import check_model, single_op

import ortstate

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("weight_type", [ov.Type.u4, ov.Type.u8, ov.Type.i8])
def test_grouped_decompression_matches_openvino_tightly(tmp_path, weight_type):
    groups, group, out = 4, 16, 8
    low, high = (0, 16) if weight_type == ov.Type.u4 else (0, 256) if weight_type == ov.Type.u8 else (-128, 128)
    w = ops.constant(RNG.integers(low, high, (out, groups, group)).astype(np.int32), dtype=weight_type)
    zp = ops.constant(RNG.integers(low, high, (out, groups, 1)).astype(np.int32), dtype=weight_type)
    scale = ops.constant((RNG.random((out, groups, 1)) * 0.013 + 0.001).astype(np.float16))
    decompressed = ops.multiply(ops.subtract(ops.convert(w, "f16"), ops.convert(zp, "f16")), scale)
    weight = ops.convert(
        ops.reshape(decompressed, ops.constant(np.array([out, groups * group], np.int64)), False), "f32"
    )
    x = ops.parameter([2, groups * group], np.float32, name="x")
    xml = single_op(tmp_path, ops.matmul(x, weight, False, True), [x])
    check_model(xml, {"x": RNG.standard_normal((2, groups * group)).astype(np.float32)}, rtol=1e-5, atol=1e-5)
    graph = ortstate.convert(xml).graph
    # The whole chain became one f32 initializer (MatMul's transpose_b stays a Transpose of it).
    assert [n.op_type for n in graph.node] == ["Transpose", "MatMul"]
    assert [np.dtype(onnx_dtype(i)) for i in graph.initializer] == [np.float32]


def onnx_dtype(tensor):
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(tensor.data_type)

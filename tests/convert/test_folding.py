"""Weight-decompression chains that no consumer takes compressed (here an Add; MatMul and Gather
take them compressed, see compressed/test_weights.py) fold to f32 initializers, decompressed in f32 as
OpenVINO's CPU does."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from oracle import check_model, single_op

import ortstate
from ortstate.convert import read_report

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("weight_type", [ov.Type.u4, ov.Type.u8, ov.Type.i8])
def test_grouped_decompression_matches_openvino_tightly(tmp_path, weight_type):
    groups, group, out = 4, 16, 32
    low, high = (0, 16) if weight_type == ov.Type.u4 else (0, 256) if weight_type == ov.Type.u8 else (-128, 128)
    w = ops.constant(RNG.integers(low, high, (out, groups, group)).astype(np.int32), dtype=weight_type)
    zp = ops.constant(RNG.integers(low, high, (out, groups, 1)).astype(np.int32), dtype=weight_type)
    scale = ops.constant((RNG.random((out, groups, 1)) * 0.013 + 0.001).astype(np.float16))
    decompressed = ops.multiply(ops.subtract(ops.convert(w, "f16"), ops.convert(zp, "f16")), scale)
    weight = ops.convert(
        ops.reshape(decompressed, ops.constant(np.array([out, groups * group], np.int64)), False), "f32"
    )
    x = ops.parameter([out, groups * group], np.float32, name="x")
    xml = single_op(tmp_path, ops.add(x, weight), [x])
    check_model(xml, {"x": RNG.standard_normal((out, groups * group)).astype(np.float32)}, rtol=1e-6, atol=1e-6)
    model = ortstate.convert(xml)
    # The whole chain became one f32 initializer, and the report says it was expanded.
    assert [n.op_type for n in model.graph.node] == ["Add"]
    assert [np.dtype(onnx_dtype(i)) for i in model.graph.initializer] == [np.float32]
    (row,) = read_report(model)
    assert (row["as"], row["count"], row["bytes"]) == ("expanded to f32", 1, out * groups * group * 4)


def onnx_dtype(tensor):
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(tensor.data_type)

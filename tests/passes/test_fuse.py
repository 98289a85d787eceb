"""The session fuses per-variable state ops into one node per dtype group (and read level)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import openvino as ov
import openvino.opset13 as ops
from openvino import opset6
from oracle import RESET, check_steps, save_ir, variable

import ortstate
from ortstate.model_meta import read_meta
from ortstate.passes import fuse_state_ops

RNG = np.random.default_rng(5)


def contrib_ops(model):
    return Counter(n.op_type for n in model.graph.node if n.domain == "ai.onnx.contrib")


def test_many_variables_of_mixed_dtypes(tmp_path):
    x = ops.parameter([2], np.float32, name="x")
    n = ops.parameter([2], np.int64, name="n")
    results, sinks = [], []
    for i in range(21):
        dtype = np.float16 if i == 20 else np.float32
        var = variable(f"f{i}", [2], dtype)
        add = ops.add(opset6.read_value(var), ops.convert(ops.multiply(x, ops.constant(np.float32(i))), dtype))
        results.append(ops.result(add))
        sinks.append(opset6.assign(add, var))
    for i in range(3):
        var = variable(f"i{i}", [2], np.int64)
        add = ops.add(opset6.read_value(var), ops.multiply(n, ops.constant(np.int64(i + 1))))
        results.append(ops.result(add))
        sinks.append(opset6.assign(add, var))
    xml = save_ir(ov.Model(results, sinks, [x, n], "many"), tmp_path, "many")
    model = ortstate.convert(xml)
    assert contrib_ops(model) == {"ReadValue": 24, "Assign": 24}
    fused = onnx.ModelProto()
    fused.CopyFrom(model)
    fuse_state_ops(fused, read_meta(model))
    assert contrib_ops(fused) == {
        "ReadValues16": 1,
        "ReadValues5": 1,
        "ReadValues3": 1,
        "AssignValues16": 1,
        "AssignValues5": 1,
        "AssignValues3": 1,
    }
    steps = [{"x": RNG.standard_normal(2).astype(np.float32), "n": RNG.integers(-5, 5, 2)} for _ in range(4)]
    check_steps(xml, [*steps[:3], RESET, steps[3]], forms=(False,), rtol=2e-3, atol=2e-3)


def test_init_reading_another_variable_is_read_after_it(tmp_path):
    """T5 keeps encoder_hidden_states as a variable whose read feeds other variables' inits."""
    enc = ops.parameter([1, 3], np.float32, name="enc")
    x = ops.parameter([1, 3], np.float32, name="x")
    va, vb = variable("enc_state", [1, 3], np.float32), variable("cross", [1, 3], np.float32)
    ra = opset6.read_value(enc, va)
    rb = opset6.read_value(ops.multiply(ra, ops.constant(np.float32(2))), vb)
    out = ops.add(rb, x)
    xml = save_ir(
        ov.Model([ops.result(out), ops.result(ra)], [opset6.assign(ra, va), opset6.assign(out, vb)], [enc, x], "dep"),
        tmp_path,
        "dep",
    )
    model = ortstate.convert(xml)
    fuse_state_ops(model, read_meta(model))
    assert contrib_ops(model) == {"ReadValue": 2, "AssignValues2": 1}  # two read levels: not fused
    steps = [
        {"enc": RNG.standard_normal((1, 3)).astype(np.float32), "x": RNG.standard_normal((1, 3)).astype(np.float32)}
        for _ in range(5)
    ]
    check_steps(xml, [*steps[:3], RESET, *steps[3:]])

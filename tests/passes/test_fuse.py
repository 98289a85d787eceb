"""The session fuses per-variable state ops into one node per dtype group (and read level)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import openvino as ov
import openvino.opset13 as ops
from openvino import opset6
from oracle import RESET, check_steps, save_ir, set_state, variable

import ortstate
from ortstate.meta import read_meta
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
    assert contrib_ops(fused) == {  # zero inits: the reads take the request key alone
        "ReadStates16_float32": 1,
        "ReadStates5_float32": 1,
        "ReadStates3_int64": 1,
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


def test_reads_of_zero_inits_take_the_key_alone(tmp_path):
    """Variables z1, z2 start as zeros of their shape (z2 set before the first run), c as 2x
    (computed): one ReadStates2 of z1 and z2 taking the request key only (the store makes the
    zeros), c's read as it was; one write of all three. Stepped against OpenVINO through a reset, in
    the custom-op form."""
    x = ops.parameter([2, 3], np.float32, name="x")
    z1, z2, c = variable("z1", [2, 3]), variable("z2", [2, 3]), variable("c", [2, 3])
    r1, r2 = opset6.read_value(z1), opset6.read_value(z2)
    rc = opset6.read_value(ops.multiply(x, ops.constant(np.float32(2))), c)
    n1, n2, nc = ops.add(r1, x), ops.add(r2, ops.multiply(x, x)), ops.add(rc, r1)
    sinks = [opset6.assign(n1, z1), opset6.assign(n2, z2), opset6.assign(nc, c)]
    xml = save_ir(ov.Model([ops.result(v) for v in (n1, n2, nc)], sinks, [x], "zeros"), tmp_path, "zeros")
    model = ortstate.convert(xml)
    fuse_state_ops(model, read_meta(model))
    assert contrib_ops(model) == {"ReadStates2_float32": 1, "ReadValue": 1, "AssignValues3": 1}
    states = next(n for n in model.graph.node if n.op_type == "ReadStates2_float32")
    assert list(states.input) == ["ortstate.request"]
    start = RNG.standard_normal((2, 3)).astype(np.float32)
    steps = [set_state("z2", start), *[{"x": RNG.standard_normal((2, 3)).astype(np.float32)} for _ in range(3)]]
    check_steps(xml, [*steps, RESET, *steps], forms=(False,))

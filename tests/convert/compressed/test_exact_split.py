"""``compressed/exact_split.py``: activations split onto int8 grids, and a split group's ``If``
on the row count; run in ONNX Runtime against float64."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from quantized_weights import quantized

from ortstate.convert.builder import GraphBuilder
from ortstate.convert.compressed.exact_split import (
    SPLIT8_MAX_ROWS,
    SPLIT_MAX_ROWS,
    int8_grid_parts,
    write_split_group,
)
from ortstate.convert.compressed.nbits import MS_DOMAIN, stacked_inputs
from ortstate.convert.compressed.plan import SplitGroup
from ortstate.meta import split_rows_name

RNG = np.random.default_rng(8)


def _session(b: GraphBuilder, outs: list[str]) -> ort.InferenceSession:
    for out in outs:
        b.add_output(out, TensorProto.FLOAT, None)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(MS_DOMAIN, 1)]
    model = helper.make_model(b.graph(), opset_imports=opsets, ir_version=10)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("shape", [(20,), (2, 20)], ids=["1-D", "2-D"])
def test_the_parts_add_up_to_the_activations_and_the_first_two_lie_on_int8_grids(shape):
    b = GraphBuilder("g")
    b.add_input("x", TensorProto.FLOAT, list(shape))
    rows = int8_grid_parts("x", len(shape), 16, 20, b, b)  # K 20 in blocks of 16: the last one padded
    x = (RNG.standard_t(2, shape) * 10).astype(np.float32)  # heavy tails: a few large values
    (parts,) = _session(b, [rows]).run(None, {"x": x})
    assert parts.shape == (*shape[:-1], 3, 20)
    np.testing.assert_allclose(parts.sum(-2, dtype=np.float64), x, rtol=0, atol=np.abs(x).max() * 2**-23)
    for part in np.moveaxis(parts, -2, 0)[:2]:
        blocks = np.pad(part, [(0, 0)] * (part.ndim - 1) + [(0, 12)]).reshape(*shape[:-1], 2, 16)
        scale = np.abs(blocks).max(-1, keepdims=True) / 127
        steps = blocks / np.where(scale == 0, 1, scale)
        np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)
    assert np.abs(parts[..., 2, :]).max() <= np.abs(x).max() / 64516 * 1.01


def _group():
    def weight(rows, bits, name):
        codes = RNG.integers(0, 1 << bits, (rows, 32)).astype(np.uint8)
        zp = RNG.integers(0, 1 << bits, (rows, 2))
        return quantized(codes, RNG.random((rows, 2)) + 0.5, zp, bits=bits, block=16, group=16, name=name)

    weights = [weight(8, 8, "v"), weight(4, 4, "q"), weight(2, 4, "k")]
    return SplitGroup(tuple((SimpleNamespace(name=w.layer.name), w) for w in weights))


def _dense(w) -> np.ndarray:
    per_value = np.repeat(np.arange(w.groups), w.group)
    return (w.codes().astype(np.float64) - w.zero_point[:, per_value]) * w.scale[:, per_value]


def _level(node) -> int:
    return next(a.i for a in node.attribute if a.name == "accuracy_level")


def test_each_bit_width_of_a_group_is_one_if_on_the_row_count():
    group = _group()
    b = GraphBuilder("g")
    b.add_input("x", TensorProto.FLOAT, ["rows", 32])
    fused4, fused8 = stacked_inputs(b, group.weights(4), 4), stacked_inputs(b, group.weights(8), 8)
    outs = write_split_group(b, group, "q", "x", 2, fused4, fused8)
    assert len(outs) == 3  # q, k, v: group.ordered
    assert [n.op_type for n in b.nodes] == ["Size", "LessOrEqual", "If", "Split", "Size", "LessOrEqual", "If"]
    ifs = [{a.name: a.g for a in n.attribute} for n in b.nodes if n.op_type == "If"]
    names = [(g["then_branch"].name, g["else_branch"].name) for g in ifs]
    assert names == [("q/int4_few_rows", "q/int4_many_rows"), ("q/int8_few_rows", "q/int8_many_rows")]

    def kernels(g):
        return [(n.op_type, _level(n) if n.op_type == "MatMulNBits" else None) for n in g.node if n.domain == MS_DOMAIN]

    # 4-bit: int8 on few rows, f32 on many; 8-bit: int8 on few rows, dequantized to f32 on many
    assert [kernels(ifs[0][k]) for k in ("then_branch", "else_branch")] == [[("MatMulNBits", 4)], [("MatMulNBits", 0)]]
    assert [kernels(ifs[1][k]) for k in ("then_branch", "else_branch")] == [
        [("MatMulNBits", 4)],
        [("FusedMatMul", None)],
    ]
    assert "DequantizeLinear" in [n.op_type for n in ifs[1]["else_branch"].node]
    # 4-bit: the limit (rows x K) in the initializer the runtime sets at load; 8-bit: a constant
    limits = [n.input[1] for n in b.nodes if n.op_type == "LessOrEqual"]
    assert limits[0] == split_rows_name(32) and limits[1] != split_rows_name(32)
    assert [numpy_helper.to_array(i).tolist() for i in b.initializers if i.name == limits[0]] == [SPLIT_MAX_ROWS * 32]
    session = _session(b, outs)
    for rows in (1, SPLIT_MAX_ROWS, SPLIT_MAX_ROWS + 2, SPLIT8_MAX_ROWS, SPLIT8_MAX_ROWS + 1):
        x = RNG.standard_normal((rows, 32)).astype(np.float32)
        for got, w in zip(session.run(None, {"x": x}), [group.weights(4)[0], group.weights(4)[1], group.weights(8)[0]]):
            want = x.astype(np.float64) @ _dense(w).T  # f32 sums of 32 products: a few f32 ulps of the largest
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=np.abs(want).max() * 1e-6)


def test_one_row_needs_no_if():
    group = SplitGroup(_group().members[1:])  # q and k, 4-bit
    b = GraphBuilder("g")
    b.add_input("x", TensorProto.FLOAT, [32])
    outs = write_split_group(b, group, "q", "x", 1, stacked_inputs(b, group.weights(4), 4), None)
    assert "If" not in [n.op_type for n in b.nodes] and len(outs) == 2

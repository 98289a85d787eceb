"""``compressed/nbits.py``: a weight's initializers as the contrib ops take them, and the
``MatMulNBits`` node; run in ONNX Runtime against the weight dequantized in numpy."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from quantized_weights import quantized

from ortstate.convert.builder import GraphBuilder
from ortstate.convert.compressed.nbits import (
    MS_DOMAIN,
    gather_inputs,
    matmul_nbits,
    nibble_inputs,
    stacked_inputs,
)

RNG = np.random.default_rng(5)


def _weight(rows: int, bits: int, name: str, zp: int | None = None):
    codes = RNG.integers(0, 1 << bits, (rows, 32)).astype(np.uint8)
    scale = RNG.random((rows, 2)).astype(np.float32) + 0.5
    zero = RNG.integers(0, 1 << bits, (rows, 2)) if zp is None else np.full((rows, 2), zp)
    return quantized(codes, scale, zero, bits=bits, block=16, group=16, name=name)


def _dense(w) -> np.ndarray:
    """The weight ``[rows, k]`` dequantized (float64)."""
    per_value = np.repeat(np.arange(w.groups), w.group)
    return (w.codes().astype(np.float64) - w.zero_point[:, per_value]) * w.scale[:, per_value]


def _initializers(b: GraphBuilder) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in b.initializers}


def _run(b: GraphBuilder, out: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    b.add_output(out, TensorProto.FLOAT, None)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(MS_DOMAIN, 1)]
    model = helper.make_model(b.graph(), opset_imports=opsets, ir_version=10)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_weights_stacked_by_rows_are_one_matmulnbits_over_all_their_rows():
    wa, wb = _weight(3, 4, "q"), _weight(2, 4, "k")
    b = GraphBuilder("g")
    b.add_input("a", TensorProto.FLOAT, [2, 32])
    inputs = stacked_inputs(b, [wa, wb], 4)
    assert inputs.names == ("q+1", "q+1_scale", "q+1_zero_point") and not inputs.nibbles
    assert inputs.attrs == {"K": 32, "N": 5, "bits": 4, "block_size": 16}
    values = _initializers(b)
    assert values["q+1"].shape == (5, 2, 8)
    assert values["q+1_scale"].tolist() == np.concatenate([wa.scale, wb.scale]).reshape(-1).tolist()
    zp = np.concatenate([wa.zero_point, wb.zero_point])
    assert values["q+1_zero_point"].tolist() == (zp[:, 0] | zp[:, 1] << 4).tolist()  # 2 blocks: one byte a row
    out = matmul_nbits(b, "a", inputs, accuracy_level=0)
    assert [(n.op_type, n.domain) for n in b.nodes] == [("MatMulNBits", MS_DOMAIN)]
    assert next(a.i for a in b.nodes[0].attribute if a.name == "accuracy_level") == 0
    acts = RNG.standard_normal((2, 32)).astype(np.float32)
    want = acts.astype(np.float64) @ np.concatenate([_dense(wa), _dense(wb)]).T
    np.testing.assert_allclose(_run(b, out, {"a": acts}), want, rtol=1e-5, atol=1e-5)


def test_default_zero_points_are_not_written():
    b = GraphBuilder("g")
    assert stacked_inputs(b, [_weight(2, 8, "w", zp=128)], 8).names == ("w", "w_scale")


def test_an_8_bit_weight_as_nibble_halves_adds_their_two_results():
    w = _weight(3, 8, "w")
    b = GraphBuilder("g")
    b.add_input("a", TensorProto.FLOAT, [1, 32])
    inputs = nibble_inputs(b, w)
    assert inputs.names == ("w", "w_scale", "w_zero_point") and inputs.nibbles
    assert inputs.attrs == {"K": 32, "N": 6, "bits": 4, "block_size": 16}
    assert _initializers(b)["w_scale"].tolist() == np.concatenate([w.scale * 16, w.scale]).reshape(-1).tolist()
    out = matmul_nbits(b, "a", inputs, accuracy_level=0)
    assert [n.op_type for n in b.nodes] == ["MatMulNBits", "Split", "Add"]
    acts = RNG.standard_normal((1, 32)).astype(np.float32)
    np.testing.assert_allclose(_run(b, out, {"a": acts}), acts @ _dense(w).T, rtol=1e-5, atol=1e-5)


def test_a_quantized_table_gathers_dequantized_rows():
    w = _weight(4, 4, "table")
    b = GraphBuilder("g")
    b.add_input("i", TensorProto.INT64, [2])
    inputs = gather_inputs(b, w)
    assert inputs.names == ("table", "table_scale", "table_zero_point")
    assert inputs.attrs == {"bits": 4, "block_size": 16, "gather_axis": 0, "quantize_axis": 1}
    assert _initializers(b)["table"].shape == (4, 16)
    data, *params = inputs.names
    out = b.op("GatherBlockQuantized", [data, "i", *params], inputs.attrs, domain=MS_DOMAIN)
    got = _run(b, out, {"i": np.array([3, 1], np.int64)})
    np.testing.assert_allclose(got, _dense(w)[[3, 1]], rtol=1e-6)

"""Compressed weights (NNCF int4/int8, f16/bf16) stay compressed, and compute as OpenVINO does.

Each case builds the decompression subgraph OpenVINO's tools write (codes ``u4/i4/u8/i8``, ``f16``
scales, zero points for asymmetric ones, a ``Reshape`` of the groups) feeding MatMul (both
``transpose_b``) or Gather, compares both ONNX forms with OpenVINO (exact config), and checks the
structure: the ONNX Runtime op that carries the weight, no f32 copy of it, initializers about as
large as the compressed weight.
"""

from __future__ import annotations

import math
from collections import Counter

import ml_dtypes
import numpy as np
import onnx
import openvino as ov
import openvino.opset8 as ops8
import openvino.opset13 as ops
import oracle
import pytest
from oracle import check_model, open_session, ov_request, ov_run, single_op

import ortstate
from ortstate.convert import read_report
from ortstate.passes import walk

RNG = np.random.default_rng(12)


@pytest.fixture(autouse=True)
def exact_openvino(monkeypatch):
    """OpenVINO's exact config for compressed weights: its CPU plugin otherwise quantizes the
    activations of a compressed MatMul to int8 (logits move ~1e-2). Only here: the key also
    changes how it runs bf16 variables (test_state.py pins that behaviour)."""
    monkeypatch.setitem(oracle.OV_CONFIG, "DYNAMIC_QUANTIZATION_GROUP_SIZE", "0")


TYPES = {
    "u4": (ov.Type.u4, 4, 0, 16),
    "i4": (ov.Type.i4, 4, -8, 8),
    "u8": (ov.Type.u8, 8, 0, 256),
    "i8": (ov.Type.i8, 8, -128, 128),
}


def compressed(rows: int, k: int, wtype: str, group: int | None, sym: bool, transpose_b: bool = True):
    """An OpenVINO decompression chain for a ``[rows, k]`` weight (``[k, rows]`` without
    transpose_b), groups of ``group`` along k (None: per channel); returns (node, f32 value as
    OpenVINO computes it: ``(w - zp) * scale`` in f32)."""
    ov_type, bits, low, high = TYPES[wtype]
    groups = 1 if group is None else k // group
    size = k // groups
    codes = RNG.integers(low, high, (rows, groups, size))
    scale = (RNG.random((rows, groups, 1)) * 0.02 + 0.001).astype(np.float16)
    zp = None if sym else RNG.integers(low, high, (rows, groups, 1))
    dense = ((codes - (0 if zp is None else zp)) * scale.astype(np.float32)).astype(np.float32).reshape(rows, k)
    if not transpose_b:  # [groups, size, rows], scales [groups, 1, rows]: groups run along dim 0
        codes, scale = codes.transpose(1, 2, 0), scale.transpose(1, 2, 0)
        zp = None if zp is None else zp.transpose(1, 2, 0)
        dense = dense.T
    if group is None:  # per channel: 2-D codes, no Reshape
        codes, scale = codes.reshape(dense.shape), scale.reshape((rows, 1) if transpose_b else (1, rows))
        zp = None if zp is None else zp.reshape(scale.shape)
    x = ops.convert(ops.constant(codes.astype(np.int32), dtype=ov_type), "f16")
    if zp is not None:
        x = ops.subtract(x, ops.convert(ops.constant(zp.astype(np.int32), dtype=ov_type), "f16"))
    x = ops.multiply(x, ops.constant(np.ascontiguousarray(scale)))
    if group is not None:
        x = ops.reshape(x, ops.constant(np.array(dense.shape, np.int64)), False)
    return ops.convert(x, "f32"), dense


def initializer_bytes(model: onnx.ModelProto) -> int:
    return sum(
        math.prod(t.dims) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize for t in model.graph.initializer
    )


def assert_no_f32_copy(model: onnx.ModelProto, elements: int) -> None:
    floats = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    assert all(math.prod(t.dims) < elements // 4 for t in floats), [(t.name, list(t.dims)) for t in floats]


CASES = [  # (rows, k, group): per channel on k a multiple of 128 and not one of 16; odd group counts
    (33, 96, None),
    (33, 100, None),
    (17, 96, 32),
    (9, 192, 64),
    (8, 384, 128),
    (7, 144, 48),
]


def nbits_attrs(model: onnx.ModelProto) -> list[dict]:
    nodes = [n for n in walk.nodes(model.graph) if n.op_type == "MatMulNBits"]
    return [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in nodes]


@pytest.mark.parametrize("wtype", list(TYPES))
@pytest.mark.parametrize("sym", [False, True], ids=["asym", "sym"])
@pytest.mark.parametrize(("rows", "k", "group"), CASES)
@pytest.mark.parametrize("transpose_b", [True, False], ids=["tb", "no_tb"])
def test_matmul_weight_kept_compressed(tmp_path, wtype, sym, rows, k, group, transpose_b):
    """Both kernels: 6 rows (a prompt: a 4-bit weight's f32-compute kernel) against OpenVINO and
    numpy, and 2 rows (decoding a batch of two: the exact int8 split) in both forms against numpy
    (OpenVINO 2026.4's CPU plugin gets 2 rows of a weight in groups of 48 wrong)."""
    weight, dense = compressed(rows, k, wtype, group, sym, transpose_b)
    x = ops.parameter([2, -1, k], np.float32, name="x")
    xml = single_op(tmp_path, ops.matmul(x, weight, False, transpose_b), [x])
    feeds = {"x": RNG.standard_normal((2, 3, k)).astype(np.float32)}
    (want,) = check_model(xml, feeds, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(want, feeds["x"] @ (dense.T if transpose_b else dense), rtol=1e-4, atol=1e-4)
    one_row = RNG.standard_normal((2, 1, k)).astype(np.float32)
    for explicit in (False, True):
        got = open_session(xml, explicit).run(None, {"x": one_row})[0]
        np.testing.assert_allclose(got, one_row @ (dense.T if transpose_b else dense), rtol=1e-4, atol=1e-4)
    model = ortstate.convert(xml)
    ops_used = Counter(n.op_type for n in walk.nodes(model.graph))
    bits = TYPES[wtype][1]
    assert ops_used["MatMul"] == 0, ops_used
    # exact by default, behind an If on the row count: few rows split on int8 grids (three rows,
    # summed after the kernel); more rows take a 4-bit weight's f32-compute kernel, while an 8-bit
    # weight is split for any row count (the If gives the parts out to its one kernel)
    kernels = nbits_attrs(model)
    levels = sorted(a["accuracy_level"] for a in kernels)
    assert levels == ([4] if bits == 8 else [0, 4]), kernels
    assert all((a["bits"], a["K"], a["N"]) == (bits, k, rows) for a in kernels), kernels
    rounds = 4 if bits == 8 else 2  # the split in both branches, or in the few-rows one
    assert (ops_used["If"], ops_used["ReduceSum"], ops_used["Round"]) == (1, 1, rounds), ops_used
    assert_no_f32_copy(model, rows * k)
    blocks = -(-k // kernels[0]["block_size"])
    assert initializer_bytes(model) <= rows * blocks * kernels[0]["block_size"] * bits // 8 + 10 * rows * blocks + 64
    (row,) = read_report(model)
    assert row["source"] == f"{wtype} {'per-channel' if group is None else f'g{group}'} {'sym' if sym else 'asym'}"
    assert row["as"].startswith("MatMulNBits") and "exact" in row["as"] and row["count"] == 1


@pytest.mark.parametrize("wtype", ["u4", "i8"])
@pytest.mark.parametrize(("k", "group"), [(256, 128), (100, None), (4864, None)])
@pytest.mark.parametrize("seq", [1, 2, 3, 4, 32])
def test_exact_split_has_f32_accuracy(tmp_path, wtype, k, group, seq):
    """Heavy-tailed activations (log-normal magnitudes, all-zero and tiny blocks, as LLM hidden
    states have): the result matches float64 numpy to f32 accuracy, far inside what int8
    activations give (~1e-2 relative). This pins ONNX Runtime's int8 kernel quantizing blocks
    symmetrically with scale max|a| / 127: a different scheme would break the exact split here."""
    rows = 64
    weight, dense = compressed(rows, k, wtype, group, sym=False)
    x = ops.parameter([1, -1, k], np.float32, name="x")
    xml = single_op(tmp_path, ops.matmul(x, weight, False, True), [x])
    acts = RNG.standard_normal((1, seq, k)) * np.exp(2 * RNG.standard_normal((1, seq, k)))
    acts[..., : min(k, 64)] = 0.0  # a block of zeros (scale 0)
    acts[..., -8:] *= 1e-20  # values far below the block's largest
    acts = acts.astype(np.float32)
    exact = acts.astype(np.float64) @ dense.T.astype(np.float64)
    scale = np.abs(exact).max()
    for explicit in (False, True):
        got = open_session(xml, explicit).run(None, {"x": acts})[0]
        assert np.abs(got - exact).max() <= 2e-6 * scale, (explicit, np.abs(got - exact).max() / scale)


def test_weights_sharing_an_input_share_one_split(tmp_path):
    """q/k/v-like MatMuls on one activation run in one If that splits the activation once; their
    4-bit weights (sym and asym, u4 and i4) as one kernel over all their rows, the 8-bit one as
    another; a weight with another block gets its own If. Both row counts, both forms, numpy."""
    k = 256
    made = [
        compressed(24, k, "u4", 128, sym=False),
        compressed(8, k, "i8", None, sym=True),
        compressed(16, k, "i4", 128, sym=True),
        compressed(8, k, "u4", 64, sym=False),
    ]
    x = ops.parameter([1, -1, k], np.float32, name="x")
    outs = [ops.matmul(x, weight, False, True) for weight, _ in made]
    xml = single_op(tmp_path, outs, [x])
    model = ortstate.convert(xml)
    ifs = [n for n in model.graph.node if n.op_type == "If"]
    assert sorted(len(n.output) for n in ifs) == [1, 2], [list(n.output) for n in ifs]
    assert "Round" not in {n.op_type for n in model.graph.node}  # the split lives in the branches
    used = Counter(n.op_type for n in walk.nodes(model.graph))
    assert used["Round"] == 2 * 3  # group 1: once a branch (the 8-bit weight splits in both); group 2: once
    kernels = sorted((a["bits"], a["N"], a["block_size"], a["accuracy_level"]) for a in nbits_attrs(model))
    assert kernels == [(4, 8, 64, 0), (4, 8, 64, 4), (4, 40, 128, 0), (4, 40, 128, 4), (8, 8, 128, 4)]
    for seq in (1, 3, 4, 9):
        acts = RNG.standard_normal((1, seq, k)).astype(np.float32)
        for explicit in (False, True):
            got = open_session(xml, explicit).run(None, {"x": acts})
            for g, (_, dense) in zip(got, made):
                np.testing.assert_allclose(g, acts @ dense.T, rtol=1e-5, atol=1e-5)
    rows = read_report(model)
    assert sum(r["count"] for r in rows) == 4 and all("exact" in r["as"] for r in rows), rows


@pytest.mark.parametrize("wtype", ["u4", "u8"])
def test_f16_activations(tmp_path, wtype):
    """A compressed weight decompressed to f16 for an f16 MatMul rounds each value to f16, which
    MatMulNBits cannot say: folded (reported as expanded), OpenVINO's result in both forms."""
    weight, _ = compressed(33, 128, wtype, None, sym=False)
    x = ops.parameter([1, -1, 128], np.float16, name="x")
    xml = single_op(tmp_path, ops.matmul(x, ops.convert(weight, "f16"), False, True), [x])
    for seq in (5, 1):
        feeds = {"x": RNG.standard_normal((1, seq, 128)).astype(np.float16)}
        (want,) = check_model(xml, feeds, rtol=2e-3, atol=2e-3)
        assert want.dtype == np.float16
    assert "MatMulNBits" not in {n.op_type for n in ortstate.convert(xml).graph.node}


@pytest.mark.parametrize("wtype", ["u4", "i8"])
@pytest.mark.parametrize("rank", [None, 1])
def test_activation_rank(tmp_path, wtype, rank):
    """The split reshapes by rank: a dynamic-rank input takes the f32-compute kernel (an 8-bit
    weight as its two nibble halves); a 1-D one (one row) the split, with no If. Exact in both
    forms."""
    weight, dense = compressed(33, 96, wtype, None, sym=False)
    shape = ov.PartialShape.dynamic() if rank is None else [96]
    x = ops.parameter(shape, np.float32, name="x")
    xml = single_op(tmp_path, ops.matmul(x, weight, False, True), [x])
    model = ortstate.convert(xml)
    bits = TYPES[wtype][1]
    kernels = [(a["bits"], a["accuracy_level"], a["N"]) for a in nbits_attrs(model)]
    assert kernels == ([(4, 0, 33 * bits // 4)] if rank is None else [(bits, 4, 33)])
    assert "If" not in {n.op_type for n in walk.nodes(model.graph)}
    acts = RNG.standard_normal((2, 1, 96) if rank is None else (96,)).astype(np.float32)
    for explicit in (False, True):
        got = open_session(xml, explicit).run(None, {"x": acts})[0]
        np.testing.assert_allclose(got, acts @ dense.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wtype", list(TYPES))
@pytest.mark.parametrize("sym", [False, True], ids=["asym", "sym"])
@pytest.mark.parametrize(("rows", "k", "group"), [(50, 96, None), (31, 100, None), (40, 96, 32), (12, 384, 128)])
def test_gather_table_kept_compressed(tmp_path, wtype, sym, rows, k, group):
    """Gather-8 on a compressed table: negative indices count from the end, as in OpenVINO.
    Out-of-range ones give zeros, as Gather-8 is specified and does on f32 tables: OpenVINO
    2026.4's CPU plugin returns junk for them from a compressed table (its fused compressed
    Gather skips the check), so numpy decides there."""
    table, dense = compressed(rows, k, wtype, group, sym)
    ids = ops.parameter([2, 3], np.int32, name="ids")
    xml = single_op(tmp_path, ops8.gather(table, ids, ops.constant(np.int64(0)), 0), [ids])
    feeds = {"ids": np.array([[0, rows - 1, -1], [-rows, 5, 1]], np.int32)}
    (want,) = check_model(xml, feeds, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(want, dense[feeds["ids"]], rtol=1e-6, atol=1e-6)
    outside = {"ids": np.array([[rows, -rows - 1, 1 << 30], [0, -(1 << 30), 2 * rows]], np.int32)}
    for form in ("custom-op", "explicit"):
        got = ortstate.StatefulSession(xml, form=form).run(None, outside)[0]
        np.testing.assert_array_equal(got[1, 0], dense[0])
        assert not got[0].any() and not got[1, 1:].any()
    model = ortstate.convert(xml)
    ops_used = Counter(n.op_type for n in model.graph.node)
    assert ops_used["GatherBlockQuantized"] == 1 and ops_used["Gather"] == 0, ops_used
    assert_no_f32_copy(model, rows * k)
    assert initializer_bytes(model) <= rows * k * TYPES[wtype][1] // 8 + 10 * rows * (k // 16) + 64


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("use", ["matmul_tb", "matmul", "gather"])
def test_float_weights_stay_in_their_type(tmp_path, dtype, use):
    rows, k = 40, 64
    value = RNG.standard_normal((rows, k)).astype(np.float32)
    stored = value.astype(np.float16 if dtype == "f16" else ml_dtypes.bfloat16)
    const = ops.constant(stored.view(np.uint16).astype(np.int32), dtype=ov.Type.u16)  # exact bits
    const = ops.constant(stored.astype(np.float32), dtype=ov.Type.f16 if dtype == "f16" else ov.Type.bf16)
    weight = ops.convert(const, "f32")
    if use == "gather":
        ids = ops.parameter([3], np.int64, name="ids")
        out, params = ops8.gather(weight, ids, ops.constant(np.int64(0)), 0), [ids]
        feeds = {"ids": np.array([3, -1, rows], np.int64)}
    else:
        x = ops.parameter([2, k if use == "matmul_tb" else rows], np.float32, name="x")
        out, params = ops.matmul(x, weight, False, use == "matmul_tb"), [x]
        feeds = {"x": RNG.standard_normal((2, k if use == "matmul_tb" else rows)).astype(np.float32)}
    xml = single_op(tmp_path, out, params)
    check_model(xml, feeds, rtol=1e-5, atol=1e-5)
    model = ortstate.convert(xml)
    stored_type = onnx.TensorProto.FLOAT16 if dtype == "f16" else onnx.TensorProto.BFLOAT16
    big = [t for t in model.graph.initializer if math.prod(t.dims) >= rows * k]
    assert [t.data_type for t in big] == [stored_type]
    (row,) = read_report(model)
    assert (row["source"], row["count"]) == (dtype, 1)


def test_unrecognised_patterns_are_folded_and_reported(tmp_path):
    """nf4 codes and groups too small for ONNX Runtime's blocks (8) still convert, expanded to f32."""
    rows, k = 16, 64
    nf4 = ops.convert(ops.constant(RNG.integers(0, 16, (rows, k)).astype(np.int32), dtype=ov.Type.nf4), "f16")
    nf4 = ops.convert(ops.multiply(nf4, ops.constant(np.full((rows, 1), 0.5, np.float16))), "f32")
    small, _ = compressed(rows, k, "u4", 8, False)
    x = ops.parameter([1, k], np.float32, name="x")
    xml = single_op(tmp_path, [ops.matmul(x, nf4, False, True), ops.matmul(x, small, False, True)], [x])
    check_model(xml, {"x": RNG.standard_normal((1, k)).astype(np.float32)}, rtol=1e-5, atol=1e-5)
    model = ortstate.convert(xml)
    assert Counter(n.op_type for n in model.graph.node)["MatMulNBits"] == 0
    rows_ = read_report(model)
    assert sorted((r["source"], r["as"], r["count"]) for r in rows_) == [
        ("f16+nf4", "expanded to f32", 1),
        ("f16+u4", "expanded to f32", 1),
    ]


@pytest.mark.parametrize("wtype", ["u4", "u8"])
def test_int8_activations_option(tmp_path, wtype):
    """The opt-in fast path (int8 activations, as OpenVINO's default CPU config): accuracy_level 4,
    8-bit codes as they are; close to OpenVINO's default config, not to the exact one."""
    k, rows = 256, 64
    weight, dense = compressed(rows, k, wtype, 128 if wtype == "u4" else None, False)
    x = ops.parameter([1, k], np.float32, name="x")
    xml = single_op(tmp_path, ops.matmul(x, weight, False, True), [x])
    feeds = {"x": RNG.standard_normal((1, k)).astype(np.float32)}
    path = tmp_path / "fast.onnx"
    model = ortstate.convert(xml, path, int8_activations=True)
    (node,) = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert (attrs["accuracy_level"], attrs["bits"]) == (4, 4 if wtype == "u4" else 8)
    got = ortstate.StatefulSession(path).run(None, feeds)[0]
    core = ov.Core()
    default = core.compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    want_default = ov_run(default, feeds)[0]
    exact = feeds["x"] @ dense.T
    scale = np.abs(exact).max()
    assert np.abs(got - want_default).max() < 0.05 * scale
    assert np.abs(ov_run(ov_request(xml), feeds)[0] - exact).max() < 1e-4 * scale

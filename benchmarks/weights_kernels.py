"""Which ONNX Runtime kernel should carry a compressed weight? (the converter's choice, measured)

    python -m benchmarks weights-kernels [--threads 2] [--rounds 20] [--rows 1,32] [--out DIR]

ONNX Runtime 1.31, CPU provider, the linear shapes of a Qwen2-0.5B-sized decoder (hidden 896,
intermediate 4864, 2 KV heads of 64, vocab 151936): each variant is one model holding 24 distinct
copies of the weight (as a 24-layer model does: more than the L3 cache, so weights stream from
memory as in a real decode), applied to one activation of M rows (``--rows``, default 1 and 32:
a decode step, a prefill; batched decoding has as many rows as streams). Reported: median ms per
linear, and the largest deviation from the same product computed in float64 from the dequantized
weight (``(w - zp) * scale`` in f32, OpenVINO's CPU plugin's math).

Variants: f32 MatMul (the weight expanded), the f16 weight through Cast (what ORT does with a f16
initializer), ``com.microsoft`` MatMulNBits 4-bit and 8-bit at ``accuracy_level`` 0 (f32 compute)
and 4 (int8 activations), an int8 weight as a 4-bit MatMulNBits over its high and low nibbles
(exact: ``q - zp = 16 (hi - zh) + (lo - zl)``), the converter's exact split (the activations as
three parts, two on int8 grids, through one ``accuracy_level`` 4 call of 3 rows per row: see
``ortstate/convert/compressed.py``), and standard ``DequantizeLinear`` (blocked INT4) feeding
MatMul, which ORT fuses into MatMulNBits at its session option's default accuracy level.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from benchmarks.common import RESULTS, conditions, start_run, write_results

SHAPES = {  # name: (K, N)
    "q/o 896x896": (896, 896),
    "k/v 896x128": (896, 128),
    "gate/up 896x4864": (896, 4864),
    "down 4864x896": (4864, 896),
    "lm_head 896x151936": (896, 151936),
}
BLOCK = 128


def _model(nodes: list, inits: list, k: int, outs: list[str]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "w",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _pack4(q: np.ndarray) -> np.ndarray:
    """Two 4-bit values a byte along the last axis, the first in the low nibble."""
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)


def _mnb(i: int, k: int, n: int, bits: int, acc: int, q: np.ndarray, scale: np.ndarray, zp: np.ndarray):
    """A MatMulNBits node over codes ``q`` [n, k] with per-block ``scale``/``zp`` [n, k / BLOCK]."""
    blocks = k // BLOCK
    data = q.reshape(n, blocks, BLOCK)
    data = _pack4(data) if bits == 4 else data
    zpb = _pack4(np.pad(zp, ((0, 0), (0, blocks % 2)))) if bits == 4 else zp
    inits = [
        numpy_helper.from_array(np.ascontiguousarray(data), f"B{i}"),
        numpy_helper.from_array(scale, f"S{i}"),
        numpy_helper.from_array(zpb.reshape(-1), f"Z{i}"),
    ]
    attrs = {"K": k, "N": n, "bits": bits, "block_size": BLOCK, "accuracy_level": acc}
    node = helper.make_node("MatMulNBits", ["A", f"B{i}", f"S{i}", f"Z{i}"], [f"Y{i}"], domain="com.microsoft", **attrs)
    return [node], inits


def _weights(rng: np.random.Generator, k: int, n: int, bits: int):
    q = rng.integers(0, 2**bits, (n, k), dtype=np.uint8)
    scale = (rng.random((n, k // BLOCK), dtype=np.float32) * 0.02).astype(np.float16).astype(np.float32)
    zp = rng.integers(0, 2**bits, (n, k // BLOCK), dtype=np.uint8)
    dense = (q.astype(np.float32) - np.repeat(zp, BLOCK, 1)) * np.repeat(scale, BLOCK, 1)  # [n, k]
    return q, scale, zp, dense


Builder = Callable[[int, np.random.Generator, int, int], tuple[list, list, np.ndarray]]


def f32(i, rng, k, n):  # noqa: ANN001, ANN201
    _, _, _, dense = _weights(rng, k, n, 8)
    return (
        [helper.make_node("MatMul", ["A", f"W{i}"], [f"Y{i}"])],
        [numpy_helper.from_array(dense.T.copy(), f"W{i}")],
        dense,
    )


def f16_cast(i, rng, k, n):  # noqa: ANN001, ANN201
    dense = rng.standard_normal((n, k), dtype=np.float32).astype(np.float16)
    nodes = [
        helper.make_node("Cast", [f"W{i}"], [f"Wf{i}"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["A", f"Wf{i}"], [f"Y{i}"]),
    ]
    return nodes, [numpy_helper.from_array(dense.T.copy(), f"W{i}")], dense.astype(np.float32)


def nbits(bits: int, acc: int) -> Builder:
    def build(i, rng, k, n):  # noqa: ANN001, ANN202
        q, scale, zp, dense = _weights(rng, k, n, bits)
        nodes, inits = _mnb(i, k, n, bits, acc, q, scale, zp)
        return nodes, inits, dense

    return build


def int8_as_nibbles(i, rng, k, n):  # noqa: ANN001, ANN201
    """An int8 weight as one 4-bit MatMulNBits of 2n rows: high nibbles (scale 16 s), low nibbles (scale s)."""
    q, scale, zp, dense = _weights(rng, k, n, 8)
    codes = np.concatenate([q >> 4, q & 15])
    scales = np.concatenate([scale * 16, scale])
    zps = np.concatenate([zp >> 4, zp & 15])
    nodes, inits = _mnb(i, k, 2 * n, 4, 0, codes, scales, zps)
    nodes[0].output[0] = f"P{i}"
    shape = numpy_helper.from_array(np.array([0, 2, n], np.int64), f"R{i}")
    nodes += [
        helper.make_node("Reshape", [f"P{i}", f"R{i}"], [f"PR{i}"]),
        helper.make_node("ReduceSum", [f"PR{i}", f"ax{i}"], [f"Y{i}"], keepdims=0),
    ]
    return nodes, [*inits, shape, numpy_helper.from_array(np.array([1], np.int64), f"ax{i}")], dense


def split_exact(bits: int) -> Builder:
    """The activations split exactly as the converter does: ``x1 + x2 + x3`` with ``x1``, ``x2`` on
    the int8 grid ``accuracy_level`` 4 quantizes to, as 3 rows of one MatMulNBits call, summed."""

    def build(i, rng, k, n):  # noqa: ANN001, ANN202
        q, scale, zp, dense = _weights(rng, k, n, bits)
        blocks = k // BLOCK
        c = {  # constants, one set per copy
            f"blk{i}": np.array([0, blocks, BLOCK], np.int64),
            f"parts{i}": np.array([0, 3, k], np.int64),
            f"last{i}": np.array([-1], np.int64),
            f"m2{i}": np.array([-2], np.int64),
            f"tiny{i}": np.float32(1e-30),
            f"inv{i}": np.float32(1 / 127),
        }
        nodes = [helper.make_node("Reshape", ["A", f"blk{i}"], [f"x0_{i}"])]
        rest, parts = f"x0_{i}", []
        for j in range(2):
            t = f"{i}_{j}"
            nodes += [
                helper.make_node("Abs", [rest], [f"abs{t}"]),
                helper.make_node("ReduceMax", [f"abs{t}", f"last{i}"], [f"amax{t}"], keepdims=1),
                helper.make_node("Max", [f"amax{t}", f"tiny{i}"], [f"amx{t}"]),
                helper.make_node("Mul", [f"amx{t}", f"inv{i}"], [f"s{t}"]),
                helper.make_node("Div", [rest, f"s{t}"], [f"d{t}"]),
                helper.make_node("Round", [f"d{t}"], [f"r{t}"]),
                helper.make_node("Mul", [f"r{t}", f"s{t}"], [f"g{t}"]),
                helper.make_node("Sub", [rest, f"g{t}"], [f"rest{t}"]),
            ]
            parts.append(f"g{t}")
            rest = f"rest{t}"
        nodes += [
            helper.make_node("Concat", [*parts, rest], [f"cat{i}"], axis=-2),
            helper.make_node("Reshape", [f"cat{i}", f"parts{i}"], [f"rows{i}"]),
        ]
        mnb, inits = _mnb(i, k, n, bits, 4, q, scale, zp)
        mnb[0].input[0], mnb[0].output[0] = f"rows{i}", f"P{i}"
        nodes += [*mnb, helper.make_node("ReduceSum", [f"P{i}", f"m2{i}"], [f"Y{i}"], keepdims=0)]
        return nodes, [*inits, *(numpy_helper.from_array(np.asarray(v), name) for name, v in c.items())], dense

    return build


def dq_int4(i, rng, k, n):  # noqa: ANN001, ANN201
    q, scale, zp, dense = _weights(rng, k, n, 4)
    # DequantizeLinear's blocked layout: x [k, n], blocks along axis 0, scale [k / BLOCK, n].
    x = helper.make_tensor(f"X{i}", TensorProto.UINT4, [k, n], _pack4(q.T.reshape(-1)).tobytes(), raw=True)
    z = helper.make_tensor(f"Z{i}", TensorProto.UINT4, [k // BLOCK, n], _pack4(zp.T.reshape(-1)).tobytes(), raw=True)
    nodes = [
        helper.make_node("DequantizeLinear", [f"X{i}", f"S{i}", f"Z{i}"], [f"W{i}"], axis=0, block_size=BLOCK),
        helper.make_node("MatMul", ["A", f"W{i}"], [f"Y{i}"]),
    ]
    return nodes, [x, numpy_helper.from_array(scale.T.copy(), f"S{i}"), z], dense


VARIANTS: dict[str, Builder] = {
    "f32 MatMul": f32,
    "f16 weight, Cast + MatMul": f16_cast,
    "MatMulNBits 4-bit acc 0": nbits(4, 0),
    "MatMulNBits 4-bit acc 4": nbits(4, 4),
    "MatMulNBits 8-bit acc 0": nbits(8, 0),
    "MatMulNBits 8-bit acc 4": nbits(8, 4),
    "int8 as 4-bit nibble pair, acc 0": int8_as_nibbles,
    "4-bit, exact split, acc 4": split_exact(4),
    "8-bit, exact split, acc 4": split_exact(8),
    "DequantizeLinear INT4 + MatMul": dq_int4,
}
LM_HEAD_VARIANTS = (
    "f32 MatMul",
    "MatMulNBits 8-bit acc 0",
    "MatMulNBits 8-bit acc 4",
    "int8 as 4-bit nibble pair, acc 0",
    "8-bit, exact split, acc 4",
)


def measure(variant: str, shape: str, threads: int, rounds: int, copies: int, rows: list[int]) -> dict:
    k, n = SHAPES[shape]
    rng = np.random.default_rng(0)
    nodes, inits, dense = [], [], []
    for i in range(copies):
        ns, its, d = VARIANTS[variant](i, rng, k, n)
        nodes += ns
        inits += its
        dense.append(d)
    model = _model(nodes, inits, k, [f"Y{i}" for i in range(copies)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    t0 = time.perf_counter()
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    load = time.perf_counter() - t0
    del model, inits
    row = {"variant": variant, "shape": shape, "load_s": round(load, 2)}
    for m in rows:
        a = rng.standard_normal((m, k), dtype=np.float32)
        outs = session.run(None, {"A": a})
        err = max(float(np.abs(o - (a.astype(np.float64) @ d.T.astype(np.float64))).max()) for o, d in zip(outs, dense))
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            session.run(None, {"A": a})
            times.append(time.perf_counter() - t0)
        row[f"M{m}_ms"] = round(statistics.median(times) * 1e3 / copies, 3)
        row[f"M{m}_err"] = float(f"{err:.2e}")
    return row


def markdown(doc: dict[str, Any]) -> str:
    """The run's conditions and one row per shape and variant."""
    data = doc["data"]
    ms = data["activation_rows"]
    head = ["shape", "variant", *(f"M={m} ms" for m in ms), f"max abs error M={ms[0]}", "load s"]
    lines = ["| " + " | ".join(head) + " |", "| --- | --- |" + " ---: |" * (len(ms) + 2)]
    for row in data["rows"]:
        cells = [row["shape"], row["variant"], *(f"{row[f'M{m}_ms']:.3f}" for m in ms)]
        lines.append("| " + " | ".join([*cells, f"{row[f'M{ms[0]}_err']:.1e}", f"{row['load_s']:.2f}"]) + " |")
    return (
        "# The compressed-weight kernels: ms per linear\n\n"
        + conditions(doc)
        + f" {data['threads']} threads, {data['copies']} distinct weights per model, median of {data['rounds']} "
        "runs; the error is against the same product in float64 from the dequantized weight.\n\n"
        + "\n".join(lines)
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime's threads (default 2)")
    parser.add_argument("--rounds", type=int, default=20, help="runs per variant and row count, median (default 20)")
    parser.add_argument("--copies", type=int, default=24, help="distinct weights per model (layers; default 24)")
    parser.add_argument("--shapes", nargs="*", choices=list(SHAPES), default=list(SHAPES), help="default all")
    parser.add_argument("--variants", nargs="*", choices=list(VARIANTS), default=list(VARIANTS), help="default all")
    parser.add_argument(
        "--rows", default="1,32", help="rows M of the activations, comma-separated (default 1,32: a step, a prefill)"
    )
    parser.add_argument("--name", default="weights-kernels", help="result file stem (default weights-kernels)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    args = parser.parse_args(argv)
    ms = [int(m) for m in args.rows.split(",")]
    run = start_run("weights-kernels")
    print(f"onnxruntime {ort.__version__}, {args.threads} threads; ms per linear (median), max |error| vs float64")
    heads = " ".join(f"{f'M={m} ms':>9}" for m in ms)
    print(f"{'shape':20} {'variant':34} {heads} {f'err M={ms[0]}':>9} {'load s':>7}")
    rows = []
    for shape in args.shapes:
        lm_head = shape.startswith("lm_head")
        for variant in args.variants:
            if lm_head and variant not in LM_HEAD_VARIANTS:
                continue
            row = measure(variant, shape, args.threads, args.rounds, 1 if lm_head else args.copies, ms)
            rows.append(row)
            times = " ".join(f"{row[f'M{m}_ms']:9.3f}" for m in ms)
            print(f"{shape:20} {variant:34} {times} {row[f'M{ms[0]}_err']:9.1e} {row['load_s']:7.2f}")
    data = {"threads": args.threads, "rounds": args.rounds, "copies": args.copies, "activation_rows": ms, "rows": rows}
    write_results(args.out, args.name, run, data, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

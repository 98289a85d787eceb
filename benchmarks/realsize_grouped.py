"""The grouped decode step (``ortstate.passes.grouped_decode``) on and off, side by side in one
process: the real-size int4 model (Qwen2-0.5B's shape, 14 query heads over 2 KV heads; built by
``realsize_build.py int4``), converted once, two sessions of it (the pass on; the pass off), each
prefilled to the same context with the same prompt, then decode steps alternating between them
(ABAB..., BABA... on odd steps). Prints and writes the median step of each and their ratio per
context, the largest logit difference between them, the machine and the load average. The session
made first runs a few per cent faster or slower (memory placement): run it both ways (``--first``).

    python -m benchmarks grouped                      # contexts 32,1024,2048,4000, 40 steps
    python -m benchmarks grouped --first grouped      # the same, the other session made first
    python -m benchmarks grouped --contexts 32,300 --steps 6 --out /tmp/g   # a smoke run

Run it on a quiet machine; it needs ~6 GB of memory (two sessions).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

import ortstate
import ortstate.runtime.loaded as loaded
from benchmarks.common import RESULTS, loadavg, machine, write_results
from benchmarks.realsize_build import DEFAULT_CACHE
from ortstate.timing import session_options


def _session(onnx_path: Path, grouped: bool, threads: int) -> ortstate.StatefulSession:
    keep = loaded.group_decode
    if not grouped:
        loaded.group_decode = lambda *args: 0  # the session runs GroupQueryAttention on every step
    try:
        options = session_options(threads, onnx.load(str(onnx_path), load_external_data=False))
        return ortstate.StatefulSession(onnx_path, options)
    finally:
        loaded.group_decode = keep


def _feeds(tokens: np.ndarray, past: int) -> dict[str, np.ndarray]:
    n = tokens.shape[1]
    return {
        "input_ids": tokens,
        "attention_mask": np.ones((1, past + n), np.int64),
        "position_ids": np.arange(past, past + n, dtype=np.int64)[None],
        "beam_idx": np.zeros(1, np.int32),
    }


def measure(onnx_path: Path, contexts: list[int], steps: int, threads: int, first: str) -> list[dict]:
    order = ["kernel", "grouped"] if first == "kernel" else ["grouped", "kernel"]
    sessions = {name: _session(onnx_path, name == "grouped", threads) for name in order}
    rng = np.random.default_rng(0)
    rows = []
    for context in contexts:
        prompt = rng.integers(10, 1000, (1, context))
        requests = {}
        for name, session in sessions.items():
            requests[name] = session.create_infer_request()
            requests[name].infer(_feeds(prompt, 0))
        times: dict[str, list[float]] = {name: [] for name in requests}
        logits: dict[str, np.ndarray] = {}
        worst = 0.0
        for step in range(steps):
            feeds = _feeds(rng.integers(10, 1000, (1, 1)), context + step)
            for name in list(requests) if step % 2 == 0 else list(reversed(requests)):
                start = time.perf_counter()
                logits[name] = requests[name].infer(feeds)["logits"]
                times[name].append(time.perf_counter() - start)
            worst = max(worst, float(np.abs(logits["kernel"] - logits["grouped"]).max()))
        med = {name: float(np.median(t[2:])) * 1e3 for name, t in times.items()}  # the first two: warm-up
        rows.append({"context": context, **{f"{n}_ms": round(v, 2) for n, v in med.items()}, "max_dlogits": worst})
        print(
            f"realsize_grouped: context {context}: kernel {med['kernel']:.2f} ms, grouped {med['grouped']:.2f} ms "
            f"({med['grouped'] / med['kernel']:.3f}x), max |dlogits| {worst:.1e}",
            file=sys.stderr,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", default="32,1024,2048,4000")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--first",
        choices=("kernel", "grouped"),
        default="kernel",
        help="the session made first (it can run a few %% faster)",
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    ir = args.cache / "ir" / "int4" / "openvino_model.xml"
    if not ir.is_file():
        raise SystemExit(f"realsize_grouped: {ir}: no such file (build it: python -m benchmarks real-size-build int4)")
    before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        ortstate.convert(ir, onnx_path)
        rows = measure(onnx_path, [int(c) for c in args.contexts.split(",")], args.steps, args.threads, args.first)
    after = loadavg()
    document = {
        "machine": machine(),
        "load_before": before,
        "load_after": after,
        "steps": args.steps,
        "rows": rows,
    }
    lines = [
        "### The grouped decode step on and off (int4, 14 query heads over 2 KV heads, one process, alternating)",
        "",
        f"{document['machine']['cpu']}, {args.threads} threads; load average {before[0]:.2f} before, "
        f"{after[0]:.2f} after; median of {args.steps - 2} steps each; the {args.first} session made first.",
        "",
        "| context | GroupQueryAttention ms | grouped products ms | ratio | max abs Δlogits |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        ratio = r["grouped_ms"] / r["kernel_ms"]
        lines.append(
            f"| {r['context']} | {r['kernel_ms']:.2f} | {r['grouped_ms']:.2f} | {ratio:.3f}× | {r['max_dlogits']:.1e} |"
        )
    write_results(args.out, f"realsize-grouped-{args.first}-first", document, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

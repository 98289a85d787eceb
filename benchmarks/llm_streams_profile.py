"""Where a ContinuousBatcher's time goes on a real-size LLM: ONNX Runtime's profile of the pool's
runs, by kind of run (a decode batch of N rows, a prompt chunk) and by kernel.

    python -m benchmarks llm-streams-profile [--precision int4] [--streams 32] [--prompt 128] [--new 32]

Generates for ``--streams`` prompts of ``--prompt`` random ids at once (``--new`` greedy tokens
each, as ``llm-streams`` does) with ONNX Runtime's profiler on, then reads the profile: every
``model_run`` with the kernels inside it. A run is a *decode batch* when its attention takes one
new row per stream, else a *prompt* run; decode batches are grouped by their row count (1-7, 8-15,
16-31, 32-63, 64+). Per group: runs, ms a run, ms a row, and the kernels' ms a run split into the
LM head (the ``MatMulNBits``/``MatMul`` whose output is the vocabulary wide), the other weight
products, ``GroupQueryAttention`` and everything else; the time outside kernels (ONNX Runtime's
own work between them, ``If`` frames) is the run's time minus its kernels'. The wall time of the
whole generation and the sum of the runs say how much Python costs around them. Writes
``benchmarks/results/llm-streams-profile[-PRECISION].{md,json}``. The profiler adds a little to
every kernel: compare groups with each other, and absolute times with ``llm-streams``.
"""

from __future__ import annotations

import argparse
import bisect
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, conditions, shown_path, start_run, write_results
from benchmarks.realsize_build import DEFAULT_CACHE, ir_dir

SEED = 20240607
BUCKETS = (1, 8, 16, 32, 64)  # decode batches grouped by rows: [1, 8), [8, 16), ...
PROMPTS = "prompt chunks"  # the group of every run that is not a decode batch
PARTS = ("LM head", "other weight products", "GroupQueryAttention", "other kernels")


def parse(path: Path, vocab: int, last: int) -> dict[str, dict[str, float]]:
    """The profile at ``path`` by group (see the module docstring), of its ``last`` runs only (the
    runs before: the pool's probe at load, the warm-up)."""
    events = json.loads(path.read_text())
    runs = sorted((e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"), key=lambda e: e["ts"])
    starts = [r["ts"] for r in runs]
    parts: list[dict[str, float]] = [defaultdict(float) for _ in runs]
    kinds: list[tuple[str, int] | None] = [None] * len(runs)
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        k = bisect.bisect_right(starts, e["ts"]) - 1
        if k < 0:
            continue
        op = e["args"].get("op_name", "")
        if op == "If":  # its branch's kernels are profiled on their own
            continue
        shapes = [next(iter(s.values())) for s in e["args"].get("input_type_shape", [])]
        out = [next(iter(s.values())) for s in e["args"].get("output_type_shape", [])]
        if op in ("MatMulNBits", "MatMul", "FusedMatMul") and out and out[0] and out[0][-1] == vocab:
            part = "LM head"
        elif op in ("MatMulNBits", "MatMul", "FusedMatMul", "MatMulInteger", "MatMulIntegerToFloat"):
            part = "other weight products"
        elif op == "GroupQueryAttention":
            part = "GroupQueryAttention"
            if kinds[k] is None and shapes:
                batch, rows = shapes[0][0], shapes[0][1]
                kinds[k] = ("decode", batch) if rows == 1 else ("prompt", batch * rows)
        else:
            part = "other kernels"
        parts[k][part] += e["dur"] / 1e3
    groups: dict[str, dict[str, float]] = {}
    for k in range(max(len(runs) - last, 0), len(runs)):
        kind = kinds[k]
        if kind is None:
            continue
        what, rows = kind
        if what == "decode":
            lo = BUCKETS[bisect.bisect_right(BUCKETS, rows) - 1]
            hi = next((b - 1 for b in BUCKETS if b > lo), None)
            name = f"decode, {lo}-{hi} rows" if hi else f"decode, {lo}+ rows"
        else:
            name = PROMPTS
        g = groups.setdefault(name, defaultdict(float))
        g["runs"] += 1
        g["rows"] += rows
        g["run ms"] += runs[k]["dur"] / 1e3
        for part, ms in parts[k].items():
            g[part] += ms
    return groups


def table(groups: dict[str, dict[str, float]]) -> str:
    head = "| runs of | runs | rows a run | ms a run | ms a row | " + " | ".join(PARTS) + " | outside kernels |"
    lines = [head, "| --- " + "| ---: " * (5 + len(PARTS)) + "|"]
    for name in sorted(groups, key=lambda n: (n == PROMPTS, groups[n]["rows"] / groups[n]["runs"])):
        g = groups[name]
        n = g["runs"]
        kernels = sum(g[p] for p in PARTS)
        cells = [f"{g[p] / n:,.1f}" for p in PARTS]
        lines.append(
            f"| {name} | {n:.0f} | {g['rows'] / n:,.1f} | {g['run ms'] / n:,.1f} | {g['run ms'] / g['rows']:,.2f} | "
            + " | ".join(cells)
            + f" | {(g['run ms'] - kernels) / n:,.1f} |"
        )
    return "\n".join(lines)


def measure(a: argparse.Namespace) -> dict[str, Any]:
    import onnxruntime as ort

    from ortstate.generate import ContinuousBatcher

    folder = a.model_dir or ir_dir(DEFAULT_CACHE, a.precision)
    config = json.loads((folder / "config.json").read_text())
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = a.threads, 1
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "ortstate")
    batcher = ContinuousBatcher.from_dir(folder, sess_options=options, slots=max(a.streams, 1))
    rng = np.random.default_rng(a.seed)
    prompts = [rng.integers(100, config["vocab_size"] - 100, a.prompt).tolist() for _ in range(a.streams)]
    batcher.generate_many(prompts[:1], max_new_tokens=2)  # warm-up: the first prompt run and a decode
    runs = batcher.pool.stats().runs
    t0 = time.perf_counter()
    batcher.generate_many(prompts, max_new_tokens=a.new, stop_at_eos=False)
    wall = time.perf_counter() - t0
    runs = batcher.pool.stats().runs - runs
    path = Path(batcher.pool.loaded.session.end_profiling())
    groups = parse(path, config["vocab_size"], runs)
    path.unlink()
    runs_ms = sum(g["run ms"] for g in groups.values())
    return {
        "model_dir": shown_path(folder),
        "streams": a.streams,
        "prompt": a.prompt,
        "new": a.new,
        "threads": a.threads,
        "wall_s": round(wall, 2),
        "runs_s": round(runs_ms / 1e3, 2),
        "tokens_per_s": round(a.streams * a.new / wall, 1),
        "groups": {n: {k: round(v, 2) for k, v in g.items()} for n, g in groups.items()},
    }


def markdown(doc: dict[str, Any]) -> str:
    """The run's conditions and setup, then a row per kind of run."""
    data = doc["data"]
    return "\n".join(
        [
            f"# Where a ContinuousBatcher's time goes: {Path(data['model_dir']).name} ({doc['name']})",
            "",
            conditions(doc),
            "",
            f"- model: `{data['model_dir']}`, {data['streams']} streams, prompts of {data['prompt']} random ids, "
            f"{data['new']} new greedy tokens, {data['threads']} threads, ONNX Runtime's profiler on",
            f"- the generation took {data['wall_s']} s ({data['tokens_per_s']} tokens/s with the profiler on), "
            f"of which ONNX Runtime's runs {data['runs_s']} s",
            "",
            "Per kind of run: ms a run and its kernels' ms a run by part (medians are not taken: sums over "
            "the runs, divided by their count).",
            "",
            table(data["groups"]),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, help="optimum-intel IR folder (default: the --precision real-size IR)")
    p.add_argument("--precision", choices=("int4", "fp32"), default="int4", help="which real-size IR (default int4)")
    p.add_argument("--streams", type=int, default=32, help="streams at once (default 32)")
    p.add_argument("--prompt", type=int, default=128, help="prompt length in tokens (default 128)")
    p.add_argument("--new", type=int, default=32, help="new tokens per stream (default 32)")
    p.add_argument("--threads", type=int, default=2, help="ONNX Runtime's threads (default 2)")
    p.add_argument("--seed", type=int, default=SEED, help=f"prompt seed (default {SEED})")
    p.add_argument("--name", help="result file stem (default llm-streams-profile[-fp32])")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    a = p.parse_args(argv)
    folder = a.model_dir or ir_dir(DEFAULT_CACHE, a.precision)
    if not (folder / "openvino_model.xml").is_file():
        p.error(f"{folder} has no openvino_model.xml: build it with `python -m benchmarks real-size-build`")
    run = start_run("llm-streams-profile")
    data = measure(a)
    name = a.name or ("llm-streams-profile" if a.precision == "int4" else f"llm-streams-profile-{a.precision}")
    doc = write_results(a.out, name, run, data, markdown)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

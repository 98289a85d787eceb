"""Many LLM streams at once (issue 29): ortstate's ContinuousBatcher against OpenVINO GenAI's
ContinuousBatchingPipeline and ortstate one stream at a time, on the same optimum-intel IR.

For each stream count N (``--streams``), N prompts of P random token ids (``--prompt``; seeded, ids in
[0, vocab); prompt i is the same whatever N) are all requested at once and each stream decodes G new
greedy tokens (``--new``; eos ignored, so every stream yields exactly G). Engines (``--engines``):

  ov-exact     OpenVINO GenAI ContinuousBatchingPipeline, props KV_CACHE_PRECISION=f32,
               INFERENCE_PRECISION_HINT=f32, DYNAMIC_QUANTIZATION_GROUP_SIZE=0 (tokens as exact f32)
  ov-default   the same pipeline with only INFERENCE_NUM_THREADS (int8 activations on int4/int8 weights)
  sequential   ortstate's Generator, the N prompts one after another (--sequential-limit K: only the
               first K, the queue of N computed as sequential; said in the row's note)
  pool         ortstate.generate.ContinuousBatcher (int8_activations=False, slots=N), N concurrent
               `async for token in batcher.stream(prompt, max_new_tokens=G, stop_at_eos=False)`
               on one asyncio loop
  pool-int8    the same with int8_activations=True
  pool-fake    the pool's driver over a stand-in batcher (lone Generators, one at a time): a harness check

OV GenAI's SchedulerConfig keeps its defaults (max_num_batched_tokens, dynamic_split_fuse) except
cache_size: the smallest whole GiB that holds N×(P+G) tokens of f32 KV (--kv-cache-gb sets it). The
pool gets kv_cache_bytes=None (its own default) unless --pool-same-kv. Every engine uses --threads.

What is measured, per engine and N, each in a fresh process (llm_streams_child.py) after one untimed
warm-up request: aggregate output tokens/s (all new tokens / wall time from the first request to the
last token), time to first token p50/p99 (from the moment all requests were made), inter-token latency
p50/p99 (every stream's gaps pooled), the process's peak RSS (ru_maxrss: imports, loading and
conversion included) and its RSS after loading, and every stream's tokens, compared with ortstate one
stream at a time's (a lone Generator). Rounds (--rounds) alternate the engines' order (ABC, CBA);
the tables show medians over rounds. The load average before and after every run is recorded: the
machine should be quiet, or the figures are not figures.

Writes ``benchmarks/results/NAME.json``, ``NAME.md`` and ``NAME.png`` (aggregate tokens/s vs
streams, log x; NAME is llm-streams, llm-streams-fp32 with --precision fp32, --name to choose) after
every run, and prints one PASS/MISS line per target of issue 29 on stdout (n/a: not measured);
progress goes to stderr; the exit code is 0 whatever the timings say. An engine that is missing or
fails (e.g. an ortstate without ContinuousBatcher) gets a "not available: <reason>" row and the rest
still runs.

    python -m benchmarks llm-streams                       # int4 real-size IR, 1,8,32,64 streams
    python -m benchmarks llm-streams --precision fp32
    python -m benchmarks llm-streams --quick --out /tmp/x  # tiny models/llm/llama, a smoke test

The real-size IRs (Qwen2-0.5B-shaped, random weights) are built once into
~/.cache/ortstate/realsize/ir/PRECISION by ``OPTIMUM_PYTHON benchmarks/realsize_build.py int4 fp32``,
with the Python of a venv holding torch + optimum-intel (benchmarks/requirements-realsize.txt; see
realsize_build.py's docstring). OV GenAI: ``pip install -r benchmarks/requirements-llm-streams.txt``
(the anchor of the comparison, never an ortstate dependency).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import llm_streams_report as report
from benchmarks.common import RESULTS, ROOT, loadavg, shown_path, start_run, write_results
from benchmarks.realsize_build import DEFAULT_CACHE, ir_dir
from benchmarks.realsize_runs import run_child
from benchmarks.report import rewrite_readme
from ortstate.timing import plot_unavailable

CHILD = "llm_streams_child"
TINY = ROOT / "models" / "llm" / "llama"
DEFAULT_ENGINES = ("ov-exact", "ov-default", "sequential", "pool", "pool-int8")
SEED = 20240607


def progress(msg: str) -> None:
    print(f"[llm-streams {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _counts(text: str) -> list[int]:
    try:
        counts = [int(c) for c in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of stream counts") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: stream counts are positive")
    return counts


def _engines(text: str) -> list[str]:
    names = [e.strip() for e in text.split(",") if e.strip()]
    unknown = [e for e in names if e not in report.ENGINES]
    if unknown or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a comma-separated list of distinct engines of {', '.join(report.ENGINES)}"
        )
    return names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, help="optimum-intel IR folder (default: realsize_build's --precision IR)")
    p.add_argument("--precision", choices=("int4", "fp32"), default="int4", help="which real-size IR (default int4)")
    p.add_argument("--streams", type=_counts, default=[1, 8, 32, 64], metavar="N1,N2,...", help="default 1,8,32,64")
    p.add_argument("--prompt", type=int, default=128, help="prompt length in tokens (default 128)")
    p.add_argument("--new", type=int, default=64, help="new tokens per stream (default 64)")
    p.add_argument("--threads", type=int, default=2, help="threads of every engine (default 2)")
    p.add_argument(
        "--engines",
        type=_engines,
        default=list(DEFAULT_ENGINES),
        metavar="E1,E2,...",
        help=f"default {','.join(DEFAULT_ENGINES)}",
    )
    p.add_argument("--rounds", type=int, default=1, help="rounds, alternating the engines' order (default 1)")
    p.add_argument("--seed", type=int, default=SEED, help=f"prompt seed (default {SEED})")
    p.add_argument("--kv-cache-gb", type=int, help="OV GenAI's cache_size in GiB (default: fits N×(P+G) f32 tokens)")
    p.add_argument("--pool-same-kv", action="store_true", help="give the pool OV GenAI's KV budget (default: its own)")
    p.add_argument(
        "--sequential-limit", type=int, default=0, metavar="K", help="sequential: run only K prompts (0: all)"
    )
    p.add_argument(
        "--warmup", type=int, default=4, help="new tokens of each engine's untimed first request (default 4)"
    )
    p.add_argument("--quick", action="store_true", help="smoke test: models/llm/llama, streams 1,4, prompt 8, new 8")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per measuring process (default 3600)")
    p.add_argument("--name", help="result file stem (default llm-streams, llm-streams-fp32, llm-streams-quick)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    return p


def _check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Fill the defaults that depend on other flags; refuse a folder that is not an IR export."""
    if a.quick:
        a.model_dir = a.model_dir or TINY
        a.streams, a.prompt, a.new = [1, 4], 8, 8
    a.label = a.precision if a.model_dir is None else a.model_dir.name
    a.model_dir = (a.model_dir or ir_dir(DEFAULT_CACHE, a.precision)).expanduser().resolve()
    a.name = a.name or ("llm-streams-quick" if a.quick else "llm-streams" + ("-fp32" if a.precision == "fp32" else ""))
    if not (a.model_dir / "openvino_model.xml").is_file():
        p.error(f"{a.model_dir} has no openvino_model.xml: build it with realsize_build.py (see --help)")
    if min(a.prompt, a.new, a.threads, a.rounds) < 1:
        p.error("--prompt, --new, --threads and --rounds are positive")


def model_name(model_dir: Path) -> str:
    """What realsize_build.py named the model (its ``realsize.json``), else the folder's name."""
    try:
        return str(json.loads((model_dir / "realsize.json").read_text())["model"])
    except (OSError, ValueError, KeyError):
        return model_dir.name


def kv_bytes_per_token(model_dir: Path) -> int:
    """Bytes of f32 KV cache one token takes: layers × (K and V) × KV heads × head size × 4."""
    c = json.loads((model_dir / "config.json").read_text())
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    return c["num_hidden_layers"] * 2 * c.get("num_key_value_heads", heads) * head_dim * 4


def kv_cache_gb(model_dir: Path, streams: int, tokens: int) -> int:
    """The smallest whole GiB holding ``streams`` × ``tokens`` of f32 KV, a 32-token block spare per stream."""
    return max(1, math.ceil(streams * (tokens + 32) * kv_bytes_per_token(model_dir) / 2**30))


def _convert(
    a: argparse.Namespace, work: Path, name: str = "exact", kwargs: str = "{}"
) -> tuple[Path | None, str | None]:
    """An ONNX file of the IR (``ortstate.convert`` with ``kwargs`` in a process of its own), or why not:
    every ortstate engine loads a converted file, so no engine's peak memory holds a conversion."""
    out = work / name / "model.onnx"
    out.parent.mkdir(parents=True)
    progress(f"converting {a.model_dir.name} ({name})")
    conv = run_child(["convert", "--ir", str(a.model_dir), "--onnx", str(out), "--convert-kwargs", kwargs], a.timeout)
    if "error" in conv:
        return None, f"convert: {conv['error']}"
    progress(f"converted in {conv['seconds']:.1f} s, peak RSS {conv['peak_rss_mib']:,.0f} MiB")
    return out, None


def _measure(
    engine: str, n: int, k: int, a: argparse.Namespace, files: dict[str, tuple[Path | None, str | None]]
) -> dict[str, Any]:
    """One engine at ``n`` streams in a fresh process, with the load average before and after."""
    before = loadavg()
    progress(f"{n} streams, round {k + 1}/{a.rounds}: {engine} (load average {before[0]:.2f})")
    onnx, why = files.get("int8" if engine == "pool-int8" else "exact", (None, None))
    if engine == "sequential" and onnx is None:
        result = {"error": why}
    else:
        args = [engine, "--ir", str(a.model_dir), "--streams", str(n), "--prompt", str(a.prompt), "--new", str(a.new)]
        args += ["--threads", str(a.threads), "--seed", str(a.seed), "--warmup", str(a.warmup)]
        args += ["--kv-cache-gb", str(a.kv_cache_gb or kv_cache_gb(a.model_dir, n, a.prompt + a.new))]
        args += ["--pool-same-kv"] * a.pool_same_kv
        if engine == "sequential":
            args += ["--onnx", str(onnx), "--limit", str(a.sequential_limit if a.sequential_limit < n else 0)]
        elif engine.startswith("pool") and onnx is not None:
            args += ["--onnx", str(onnx)]
        result = run_child(args, a.timeout, CHILD)
    after = loadavg()
    if "error" in result:
        progress(f"  {engine}: not available: {result['error']}")
    else:
        progress(
            f"  {engine}: {result['tokens_per_s']:,.1f} tok/s, peak RSS {result['peak_rss_mib']:,.0f} MiB "
            f"(load average {after[0]:.2f})"
        )
    return {
        "engine": engine,
        "streams": n,
        "round": k,
        "loadavg_before": before,
        "loadavg_after": after,
        "result": result,
    }


def run(a: argparse.Namespace, data: dict[str, Any], write: Any) -> None:
    """Every stream count, round and engine (alternating order), each in its own process."""
    work = Path(tempfile.mkdtemp(prefix="llm-streams-"))
    try:
        files = {}
        if {"sequential", "pool"} & set(a.engines):
            files["exact"] = _convert(a, work)
        if "pool-int8" in a.engines:
            files["int8"] = _convert(a, work, "int8", '{"int8_activations": true}')
        for n in a.streams:
            for k in range(a.rounds):
                for engine in a.engines if k % 2 == 0 else a.engines[::-1]:
                    data["runs"].append(_measure(engine, n, k, a, files))
                    data["summary"] = report.summarize(data["runs"])
                    data["tokens"] = report.compare_tokens(data["runs"])
                    write(data)  # after every run: a killed benchmark keeps what it measured
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _plot(doc: dict[str, Any], out: Path) -> list[str]:
    """``NAME.png``: tokens/s against streams (when matplotlib is there and something ran)."""
    if plot_unavailable() or not doc["data"]["summary"]:
        return []
    report.plot(doc["data"], out / f"{doc['name']}.png")
    return [f"{doc['name']}.png"]


def _rewrite_docs(doc: dict[str, Any]) -> None:
    """docs/streams.md's ``<!-- NAME-results:start/end -->`` block, from this run's report."""
    name = doc["name"]
    image = f"../benchmarks/results/{name}.png" if doc["images"] else None
    body = f"Measured by `python -m benchmarks llm-streams` ({name}):\n\n" + report.body(doc, image)
    if not rewrite_readme(ROOT / "docs" / "streams.md", body, f"{name}-results"):
        progress(f"docs/streams.md has no {name}-results markers: not rewritten")


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    _check(p, a)
    config = {k: getattr(a, k) for k in ("streams", "prompt", "new", "threads", "engines", "rounds", "seed", "warmup")}
    config |= {"model_dir": shown_path(a.model_dir), "model": model_name(a.model_dir), "precision": a.label}
    config |= {"label": a.label, "pool_same_kv": a.pool_same_kv}
    config |= {"kv_cache_gb": a.kv_cache_gb or {n: kv_cache_gb(a.model_dir, n, a.prompt + a.new) for n in a.streams}}
    config["sequential_limit"] = a.sequential_limit
    data: dict[str, Any] = {"config": config, "runs": [], "summary": {}, "tokens": {}}
    this_run = start_run("llm-streams")
    run(a, data, lambda d: write_results(a.out, a.name, this_run, d, report.markdown, _plot))
    doc = write_results(a.out, a.name, this_run, data, report.markdown, _plot)
    if a.out.resolve() == RESULTS.resolve():  # the committed results: docs/streams.md shows them
        _rewrite_docs(doc)
    for t in report.targets(data):
        print(f"{t['status']:4}  {t['target']}: {t['detail']}")
    progress(f"done in {doc['seconds'] / 60:.1f} min; wrote {a.out / (a.name + '.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Prefix caching (issue 39, item 5): ortstate's ContinuousBatcher with and without its prefix cache
against OpenVINO GenAI's ContinuousBatchingPipeline with and without ``enable_prefix_caching``, and
the cost of structured output, on the same optimum-intel IR.

Workloads (``--workloads``; the sizes are issue 39's, the anchor's in issue 39; ids are seeded random
token ids in [0, vocab); greedy, eos ignored):

  chat        a plain client's 8-turn chat: turn 1 is 64 ids; turn t's prompt = turn t-1's prompt +
              its 32 generated tokens + 64 new ids (turn 8: 736 tokens). One request at a time;
              TTFT of every turn, from its request to its first token, and the chat's total
  shared      32 requests of one 1,000-id system prompt + 16 ids of their own, 32 new tokens each,
              all at once, the system prompt requested once before (untimed): total time (the
              requests to the last token) and TTFT p50/p99
  structured  32 streams of 128 ids, up to 64 new tokens each, all at once, on ortstate: unconstrained
              against json_schema= (an object of strings, an integer and an array): tokens/s, and
              every answer decoded and validated (jsonschema)

Engines: ``ortstate`` / ``ortstate-nocache`` (``ContinuousBatcher.from_dir(DIR, threads=T,
int8_activations=False, max_num_batched_tokens=256, prefix_cache=True/False)``; an ortstate without
that option gets "not available" for the cache row and runs the other without it), ``ov-cache`` /
``ov-nocache`` (OpenVINO GenAI, exact config: KV_CACHE_PRECISION=f32, INFERENCE_PRECISION_HINT=f32,
DYNAMIC_QUANTIZATION_GROUP_SIZE=0, INFERENCE_NUM_THREADS=T; SchedulerConfig enable_prefix_caching
True/False, max_num_batched_tokens 256, cache_size: the smallest whole GiB holding every request's
tokens, plus 1). Every workload and engine runs in a fresh process (llm_prefix_child.py) after one
untimed warm-up request, rounds (``--rounds``) alternating the engines' order; the tables show
medians. Each engine's tokens with its cache are compared with its tokens without (a cache must
change no token). The load average before and after every run is recorded: the machine should be
quiet, or the figures are not figures.

Writes ``benchmarks/results/NAME.{json,md,png}`` (NAME: llm-prefix, llm-prefix-quick with --quick,
--name to choose) after every run, the plot: TTFT per chat turn per engine, cache on and off, and
the shared prompt's totals; prints one PASS/MISS line per target of issue 39 on stdout (n/a: not
measured); progress goes to stderr; the exit code is 0 whatever the timings say.

    python -m benchmarks llm-prefix                        # int4 real-size IR, every workload (tens of minutes)
    python -m benchmarks llm-prefix --workloads chat --rounds 3
    python -m benchmarks llm-prefix --quick --out /tmp/x   # tiny models/llm/llama, a smoke test

The real-size IR is built by ``real-size-build`` (see ``python -m benchmarks real-size-build
--help``); OV GenAI: ``pip install -r benchmarks/requirements-llm-streams.txt`` (never an ortstate
dependency; without it its rows say "not available").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import llm_prefix_report as report
from benchmarks.common import RESULTS, ROOT, loadavg, shown_path, start_run, write_results
from benchmarks.llm_prefix_child import ENGINES, SPEC, WORKLOADS
from benchmarks.llm_streams import kv_cache_gb, model_name
from benchmarks.realsize_build import DEFAULT_CACHE, ir_dir
from benchmarks.realsize_runs import run_child
from ortstate.timing import plot_unavailable

CHILD = "llm_prefix_child"
TINY = ROOT / "models" / "llm" / "llama"
SEED = 20240607
# --quick: the workloads' shape on the tiny llama (its context is 128 positions)
QUICK = {"turns": 3, "turn_tokens": 12, "turn_new": 4, "system": 40, "own": 4, "requests": 4, "shared_new": 4}
QUICK |= {"streams": 4, "prompt": 8, "new": 48, "warm_prompt": 8, "batched": 16}


def progress(msg: str) -> None:
    print(f"[llm-prefix {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _names(allowed: tuple[str, ...], what: str):  # noqa: ANN202 - an argparse type
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        if not names or len(set(names)) != len(names) or set(names) - set(allowed):
            raise argparse.ArgumentTypeError(
                f"{text!r}: a comma-separated list of distinct {what} of {', '.join(allowed)}"
            )
        return names

    return parse


def _spec(text: str) -> dict[str, int]:
    """``KEY=N,...`` over SPEC's keys."""
    out = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        key, _, value = item.partition("=")
        if key not in SPEC or not value.isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: KEY=N with N ≥ 1 and KEY one of {', '.join(SPEC)}")
        out[key] = int(value)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, help="optimum-intel IR folder (default: real-size-build's int4 IR)")
    p.add_argument("--threads", type=int, default=2, help="threads of every engine (default 2)")
    every = sorted({e for engines in ENGINES.values() for e in engines})
    p.add_argument(
        "--workloads",
        type=_names(WORKLOADS, "workloads"),
        default=list(WORKLOADS),
        metavar="W1,W2,...",
        help=f"of {', '.join(WORKLOADS)} (default: all)",
    )
    p.add_argument(
        "--engines",
        type=_names(tuple(every), "engines"),
        default=every,
        metavar="E1,E2,...",
        help=f"of {', '.join(every)} (default: all; each workload runs those of its own)",
    )
    p.add_argument("--rounds", type=int, default=1, help="rounds, alternating the engines' order (default 1)")
    p.add_argument("--seed", type=int, default=SEED, help=f"ids' seed (default {SEED})")
    p.add_argument(
        "--set",
        type=_spec,
        default={},
        metavar="KEY=N,...",
        help="change the workloads' sizes: " + ", ".join(f"{k}={v}" for k, v in SPEC.items()) + " (the defaults)",
    )
    p.add_argument("--kv-cache-gb", type=int, help="OV GenAI's cache_size in GiB (default: fits every request, +1)")
    p.add_argument("--quick", action="store_true", help="smoke test: models/llm/llama, tiny sizes (seconds)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per measuring process (default 3600)")
    p.add_argument("--name", help="result file stem (default llm-prefix, llm-prefix-quick with --quick)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    return p


def _check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Fill the defaults that depend on other flags; refuse a folder that is not an IR export."""
    a.spec = SPEC | (QUICK if a.quick else {}) | a.set
    if a.quick:
        a.model_dir = a.model_dir or TINY
    a.model_dir = (a.model_dir or ir_dir(DEFAULT_CACHE, "int4")).expanduser().resolve()
    a.name = a.name or ("llm-prefix-quick" if a.quick else "llm-prefix")
    if not (a.model_dir / "openvino_model.xml").is_file():
        p.error(f"{a.model_dir} has no openvino_model.xml: build it with real-size-build (see --help)")
    if min(a.threads, a.rounds) < 1:
        p.error("--threads and --rounds are positive")


def _cache_gb(a: argparse.Namespace, workload: str) -> int:
    """OV GenAI's cache_size for a workload: its requests' tokens at once, the warm-up's, plus 1 GiB."""
    s = a.spec
    streams, tokens = {
        "chat": (2, s["turns"] * (s["turn_tokens"] + s["turn_new"])),
        "shared": (s["requests"] + 1, s["system"] + s["own"] + s["shared_new"]),
        "structured": (s["streams"], s["prompt"] + s["new"]),
    }[workload]
    return a.kv_cache_gb or kv_cache_gb(a.model_dir, streams, max(tokens, s["warm_prompt"] + s["warmup"])) + 1


def _measure(workload: str, engine: str, k: int, a: argparse.Namespace) -> dict[str, Any]:
    """One workload on one engine in a fresh process, with the load average before and after."""
    before = loadavg()
    progress(f"{workload}, round {k + 1}/{a.rounds}: {engine} (load average {before[0]:.2f})")
    args = [workload, engine, "--ir", str(a.model_dir), "--spec", json.dumps(a.spec), "--threads", str(a.threads)]
    args += ["--seed", str(a.seed), "--kv-cache-gb", str(_cache_gb(a, workload))]
    result = run_child(args, a.timeout, CHILD)
    after = loadavg()
    if "error" in result:
        progress(f"  {engine}: not available: {result['error']}")
    else:
        ttft = result.get("ttft_p50_ms")
        progress(f"  {engine}: total {result['total_s']:.2f} s, TTFT p50 {ttft:,.0f} ms (load average {after[0]:.2f})")
    return {
        "workload": workload,
        "engine": engine,
        "round": k,
        "loadavg_before": before,
        "loadavg_after": after,
        "result": result,
    }


def run(a: argparse.Namespace, data: dict[str, Any], write: Any) -> None:
    """Every workload, round and engine (alternating order), each in its own process."""
    for workload in a.workloads:
        engines = data["config"]["engines"][workload]
        for k in range(a.rounds):
            for engine in engines if k % 2 == 0 else engines[::-1]:
                data["runs"].append(_measure(workload, engine, k, a))
                data["summary"] = report.summarize(data["runs"])
                data["tokens"] = report.compare_cache(data["runs"])
                write(data)  # after every run: a killed benchmark keeps what it measured


def plot(data: dict[str, Any], path: Path) -> None:
    """TTFT per chat turn, one line per engine (cache on: solid, off: dashed); the shared system
    prompt's total per engine beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (turns, shared) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    colors = {"ortstate": "C0", "ortstate-nocache": "C0", "ov-cache": "C1", "ov-nocache": "C1"}
    for engine in data["config"]["engines"].get("chat", []):
        values = report.get(data, "chat", engine, "turn_ttft_ms")
        if values:
            style = "--" if engine in report.CACHE_PAIRS.values() else "-"
            xs = range(1, len(values) + 1)
            turns.plot(xs, values, style, marker="o", color=colors.get(engine), label=report.ENGINES[engine])
    turns.set_xticks(range(1, data["config"]["spec"]["turns"] + 1))
    turns.set_xlabel("chat turn")
    turns.set_ylabel("time to first token, ms")
    turns.set_ylim(bottom=0)
    turns.grid(True, alpha=0.3)
    if turns.get_legend_handles_labels()[0]:
        turns.legend(fontsize=7)
    bars = [(e, report.get(data, "shared", e, "total_s")) for e in data["config"]["engines"].get("shared", [])]
    bars = [(e, v) for e, v in bars if v is not None]
    drawn = shared.bar([e for e, _ in bars], [v for _, v in bars], color=[colors.get(e, "C2") for e, _ in bars])
    for (engine, _), bar in zip(bars, drawn):
        bar.set_hatch("//" if engine in report.CACHE_PAIRS.values() else "")  # without a cache, as the dashed lines
    shared.set_ylabel("shared system prompt: total s")
    shared.tick_params(axis="x", labelsize=7, rotation=20)
    c = data["config"]
    s = c["spec"]
    fig.suptitle(
        f"{c['model']}, {c['threads']} threads: chat +{s['turn_tokens']} ids, {s['turn_new']} new a turn; "
        f"{s['requests']} requests sharing {s['system']:,} ids",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot(doc: dict[str, Any], out: Path) -> list[str]:
    """``NAME.png`` (when matplotlib is there and a chat or shared run gave figures)."""
    summary = doc["data"]["summary"]
    if plot_unavailable() or not (summary.get("chat") or summary.get("shared")):
        return []
    plot(doc["data"], out / f"{doc['name']}.png")
    return [f"{doc['name']}.png"]


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    _check(p, a)
    engines = {w: [e for e in ENGINES[w] if e in a.engines] for w in a.workloads}
    config: dict[str, Any] = {"model_dir": shown_path(a.model_dir), "model": model_name(a.model_dir)}
    config |= {"threads": a.threads, "rounds": a.rounds, "seed": a.seed, "spec": a.spec, "quick": a.quick}
    config |= {"workloads": a.workloads, "engines": engines, "kv_cache_gb": {w: _cache_gb(a, w) for w in a.workloads}}
    data: dict[str, Any] = {"config": config, "runs": [], "summary": {}, "tokens": {}}
    this_run = start_run("llm-prefix")
    run(a, data, lambda d: write_results(a.out, a.name, this_run, d, report.markdown, _plot))
    doc = write_results(a.out, a.name, this_run, data, report.markdown, _plot)
    for t in report.targets(data):
        print(f"{t['status']:4}  {t['target']}: {t['detail']}")
    progress(f"done in {doc['seconds'] / 60:.1f} min; wrote {a.out / (a.name + '.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

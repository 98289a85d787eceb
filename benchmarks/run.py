"""Run the ortstate benchmark suite; write benchmarks/results/latest.{md,json}, plots and the README's results.

Usage: ``python -m benchmarks per-step [--quick] [--no-readme]``. Progress goes to stderr; the targets'
PASS/MISS lines to stdout. Timings are informative: the exit code is 0 whatever they say.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import report, report_recurrent, suite
from benchmarks.common import RESULTS, ROOT, conditions, start_run, write_results
from ortstate.timing import BenchResult, markdown_table, plot_unavailable


def _jsonable(value: Any) -> Any:
    if isinstance(value, BenchResult):
        return _repo_relative(value.to_dict())
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _repo_relative(row: dict[str, Any]) -> dict[str, Any]:
    """A result whose model lies in this checkout names it as the checkout does (the results are
    committed and read on other machines, where this one's absolute paths mean nothing)."""
    model = Path(row["model"])
    if model.is_absolute() and model.is_relative_to(ROOT):
        row["model"] = model.relative_to(ROOT).as_posix()
    return row


def _markdown(doc: dict[str, Any], data: dict[str, Any], image_dir: str) -> str:
    """The report without its title (``data``: the run's own, its results as measured), the
    plots' links relative to ``image_dir``."""
    llm = data["llm"]
    demo: BenchResult = data["demo"]
    llama_note = (
        f"`models/llm/llama` has max_position_embeddings={llm['llama_max_positions']}: positions are capped so "
        f"that position + {data['config']['llm_steps']} decode steps stay within it (its IR computes RoPE at run "
        f"time and would run further, but the config is what the model was made for)."
    )
    llama_skip = {s.skipped for p in llm["llama"] for s in p["result"].runners if s.skipped}
    if llama_skip:
        llama_note += " ortstate could not run llama in this run, so only the stand-in's LLM targets count."
    else:
        llama_note += " Positions beyond that are measured on the stand-in below."
    parts = [
        conditions(doc) + f" {'The short version (`--quick`)' if data['quick'] else 'The full suite'}; "
        "medians and ratios from one run, alternating rounds, are what to read.",
        "### Targets (batch 1, 1 thread, ratios of p50s from this run)\n\n" + report.targets_table(data["targets"]),
        f"### Demo char LSTM ({demo.steps} steps × {demo.rounds} rounds)\n\n{markdown_table(demo)}",
        report_recurrent.lstm2_text(data["lstm2"]),
        report_recurrent.native_text(data["native"]),
        "### LSTM sweeps (p50 µs per step, 1 thread)\n\nhidden (1 layer, batch 1):\n\n"
        + report.sweep_table(data["sweeps"]["hidden"], "hidden")
        + "\n\nlayers (hidden 128, batch 1):\n\n"
        + report.sweep_table(data["sweeps"]["layers"], "layers")
        + "\n\nbatch (hidden 128, 1 layer):\n\n"
        + report.sweep_table(data["sweeps"]["batch"], "batch"),
        "### Number of variables (each f32 [1,16], `s = 0.5 s + x`)\n\n"
        + report.sweep_table(data["sweeps"]["variables"], "variables"),
        "### LLM decode: one token per step vs position\n\nllama (tiny, optimum-intel export): "
        + llama_note
        + "\n\n"
        + report.sweep_table(llm["llama"], "position")
        + "\n\nKV-cache stand-in (`benchmarks/irs.py:kv_decoder_ir`: llama-sized, 2 layers, KV caches "
        "[1,2,past,16] in variables as optimum writes them, MatMul/Softmax attention, 4096 positions):\n\n"
        + report.sweep_table(llm["standin"], "position"),
        "### Concurrent requests on one session (threads = Python worker threads, sessions "
        "intra_op_num_threads=1; `lstm_h512`: 1 layer, hidden 512; the process control runs the bare "
        "requests in 1 or 2 worker processes instead, at 16 requests)\n\n"
        + report.concurrency_table(data["concurrency"])
        + "\n\nMemory per request (a fresh process; RSS growth over creating the requests and running "
        "each through the prefill and one step, divided by their number):\n\n" + report.memory_table(data["memory"]),
        "### Where the time goes: one step of the demo LSTM\n\n" + report.profile_text(data["profile"]),
    ]
    if doc["images"]:
        parts.append("### Plots\n\n" + "\n".join(f"![{i}]({image_dir}{i})" for i in doc["images"]))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short version (~20 s on 2 quiet cores)")
    parser.add_argument("--no-readme", action="store_true", help="leave benchmarks/README.md alone")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    args = parser.parse_args(argv)
    cfg = suite.QUICK if args.quick else suite.FULL
    run = start_run("per-step")
    data: dict[str, Any] = {"quick": args.quick, "config": cfg.__dict__}
    with tempfile.TemporaryDirectory(prefix="ortstate-bench-") as tmp:
        data["demo"] = suite.demo(cfg)
        data["lstm2"] = suite.lstm2(cfg)
        data["native"] = suite.natives(cfg)
        data["sweeps"] = suite.sweeps(cfg, Path(tmp))
        data["llm"] = suite.llm(cfg, Path(tmp))
        data["concurrency"] = suite.concurrent(cfg, Path(tmp))
        data["memory"] = suite.memory(Path(tmp))
    data["profile"] = suite.profile(cfg)
    data["targets"] = report.targets(data["demo"], data["llm"], data["concurrency"])
    data["targets"] += report_recurrent.issue22_targets(data["lstm2"], data["native"])

    def plots(doc: dict[str, Any], out: Path) -> list[str]:
        missing = plot_unavailable()
        if missing:
            suite.progress(f"no plots: {missing}")
            return []
        return report.plots(out, data["demo"], data["sweeps"], data["llm"], data["concurrency"])

    def markdown(doc: dict[str, Any]) -> str:  # from the results as measured (the JSON keeps their medians)
        return "# ortstate benchmarks: latest run\n\n" + _markdown(doc, data, "")

    doc = write_results(args.out, "latest", run, _jsonable(data), markdown, plots)
    if not args.no_readme and args.out.resolve() == RESULTS.resolve():
        report.rewrite_readme(ROOT / "benchmarks" / "README.md", _markdown(doc, data, "results/"))
    for t in data["targets"]:
        print(f"{t['status']:4}  {t['target']}: {t['detail']}")
    suite.progress(f"done in {doc['seconds']:.0f} s; wrote {args.out / 'latest.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The real-size benchmark of issue 12: a Qwen2-0.5B-shaped LLM (random weights) in fp32/fp16/int8/int4,
OpenVINO and ortstate side by side.

For each precision, in one run:

- IR ``.bin`` size, and for each ortstate engine its ONNX size (model + external data), conversion time
  and the conversion's peak RSS (``ortstate.convert`` in a process of its own);
- for each engine in a process of its own: load time, RSS after loading, and peak RSS over loading,
  a prefill of 32 tokens and 64 decode steps;
- in one process with every engine: prefill and decode p50 ms/token over alternating rounds (after a
  checked run that is also the warm-up), and whether the greedy tokens (and logits, ≤ 1e-3) equal
  OpenVINO's with the exact config (f32 inference and KV cache, no dynamic quantization).

With ``--contexts 32,1024,2048,4000`` it runs issue 19's measurement instead (long context; see
``realsize_child.py contexts``): for each context length C, every engine in one process prefills C
tokens (timed once) and decodes checked warm-up steps, then timed rounds of ``--steps`` decode steps
alternate between the engines, each continuing its own cache (positions drift by the steps taken);
tokens and logits are compared with OpenVINO exact's at every context. Each engine's peak RSS over a
prefill of the longest context and ``--rss-steps`` decode steps is measured in a process of its own.
``--variant wide`` (repeatable) runs the full multi-head KV model (see ``realsize_build.py``).

The IRs come from ``realsize_build.py`` (torch + optimum-intel, in a venv of their own): give that
venv's Python as ``--optimum-python`` to build missing precisions, or build them beforehand.
Everything runs on ortstate's public API (``ortstate.convert``, ``StatefulSession``,
``ortstate.generate.Generator``), so it measures whatever converter ``import ortstate`` gives.

Real-size runs need GBs of RAM: on a shared machine, hold a lock around the whole run::

    flock /tmp/realsize.lock python -m benchmarks real-size --cache DIR --optimum-python ~/venvs/optimum/bin/python

Writes ``benchmarks/results/NAME.json`` (the results document, suite ``real-size`` or
``real-size-context``), ``NAME.md`` and ``NAME.png`` (``--name``, default ``realsize``,
``realsize-context`` with ``--contexts``) and, with ``--readme``, the section between
``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` of ``benchmarks/README.md``. Timings are
informative: the exit code is 0 whatever they say.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# first: it takes the environment of the measured processes before anything imports ortstate
from benchmarks import realsize_context_report, realsize_report, report
from benchmarks.common import RESULTS, ROOT, start_run, write_results
from benchmarks.realsize_build import DEFAULT_CACHE, DEFAULT_VARIANT, PRECISIONS, VARIANTS
from benchmarks.realsize_engines import CONTEXT_ENGINES, DEFAULT_ENGINES, parse_engine
from benchmarks.realsize_runs import build_ir, progress, run_contexts, run_precision
from ortstate.timing import plot_unavailable

SUITE, CONTEXT_SUITE = "real-size", "real-size-context"


def _reporter(doc: dict[str, Any]) -> Any:
    return realsize_context_report if doc["suite"] == CONTEXT_SUITE else realsize_report


def plots(doc: dict[str, Any], out: Path) -> list[str]:
    """``NAME.png`` (when matplotlib is there and a precision ran)."""
    if plot_unavailable() or not doc["data"]["precisions"]:
        return []
    _reporter(doc).plot(doc, out / f"{doc['name']}.png")
    return [f"{doc['name']}.png"]


def markdown(doc: dict[str, Any]) -> str:
    image = next(iter(doc["images"]), None)
    return f"# Real-size benchmark: {doc['name']}\n\n" + _reporter(doc).markdown(doc, image) + "\n"


def rewrite_readme(doc: dict[str, Any]) -> None:
    """The section between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` of benchmarks/README.md
    (appended as a section of its own for a new result name)."""
    name, image = doc["name"], next(iter(doc["images"]), None)
    body = _reporter(doc).markdown(doc, f"results/{image}" if image else None)
    readme_path = ROOT / "benchmarks" / "README.md"
    if not report.rewrite_readme(readme_path, body, name):
        section = f"\n### Real-size results: `{name}`\n\n<!-- {name}:start -->\n{body}\n<!-- {name}:end -->\n"
        readme_path.write_text(readme_path.read_text(encoding="utf-8") + section, encoding="utf-8")


def rerender(path: Path, out: Path, readme: bool) -> None:
    """The markdown and plot of an earlier run's results document (its JSON left as it is)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    out.mkdir(parents=True, exist_ok=True)
    doc["images"] = plots(doc, out)
    (out / f"{doc['name']}.md").write_text(markdown(doc), encoding="utf-8")
    if readme:
        rewrite_readme(doc)


def _contexts(text: str) -> list[int]:
    try:
        lengths = [int(c) for c in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of token counts") from None
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: context lengths are positive token counts")
    return lengths


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("precisions", nargs="*", metavar="PRECISION", help=f"any of {', '.join(PRECISIONS)} (default: all)")
    p.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help=f"IRs and scratch ONNX files (default {DEFAULT_CACHE})"
    )
    p.add_argument(
        "--variant",
        action="append",
        choices=VARIANTS,
        help="model variant(s) (repeatable; default: default): "
        + "; ".join(f"{k}: {v.model}, {v.description}" for k, v in VARIANTS.items()),
    )
    p.add_argument("--optimum-python", help="Python of a venv with torch + optimum-intel, to build missing IRs")
    p.add_argument(
        "--engine",
        action="append",
        help=f"engines to run (repeatable; default {' '.join(DEFAULT_ENGINES)}, with --contexts "
        f"{' '.join(CONTEXT_ENGINES)}); NAME:key=value,... adds an ortstate engine whose keys go to "
        "ortstate.convert (form=... to StatefulSession)",
    )
    p.add_argument(
        "--contexts",
        type=_contexts,
        metavar="C1,C2,...",
        help="issue 19's run instead: per context length, prefill that many tokens, then time decode steps "
        "(e.g. 32,1024,2048,4000); peak RSS at the longest",
    )
    p.add_argument("--threads", type=int, default=2, help="intra-op threads of every runtime (default 2)")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens (default 32; not with --contexts)")
    p.add_argument("--steps", type=int, help="decode steps after the prefill (default 64); --contexts: per round (16)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per engine (default 5)")
    p.add_argument("--warmup", type=int, default=4, help="--contexts: checked, untimed steps after each prefill (4)")
    p.add_argument(
        "--prefill-rounds", type=int, default=1, help="--contexts: prefills per engine and context, median (1)"
    )
    p.add_argument("--rss-steps", type=int, default=8, help="--contexts: decode steps of the peak-RSS runs (8)")
    p.add_argument("--no-load", action="store_true", help="skip the per-engine load/RSS processes")
    p.add_argument("--keep-onnx", action="store_true", help="keep the converted models in CACHE/onnx")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per measuring process (default 3600)")
    p.add_argument("--name", help="result file stem (default realsize, with --contexts realsize-context)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    p.add_argument(
        "--readme",
        action="store_true",
        help="write the results into benchmarks/README.md (between <!-- NAME:start/end --> markers; "
        "appended as a new section when they are missing)",
    )
    p.add_argument("--from-json", type=Path, metavar="NAME.json", help="only re-render the report of an earlier run")
    return p


def _check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Refuse what cannot run; fill the defaults that depend on the mode."""
    unknown = sorted(set(a.precisions) - set(PRECISIONS))
    if unknown:
        p.error(f"unknown precision {', '.join(unknown)}: choose from {', '.join(PRECISIONS)}")
    a.variant = list(dict.fromkeys(a.variant or [DEFAULT_VARIANT]))
    a.steps = a.steps or (16 if a.contexts else 64)
    a.name = a.name or ("realsize-context" if a.contexts else "realsize")
    if not a.contexts and len(a.variant) > 1:
        p.error("several --variant need --contexts (the issue-12 report is of one model)")
    if a.contexts:
        needed = max(a.contexts) + a.warmup + a.rounds * a.steps
        for v in a.variant:
            limit = VARIANTS[v].config["max_position_embeddings"]
            if needed > limit:
                p.error(
                    f"--contexts {max(a.contexts)} + {a.warmup} warm-up + {a.rounds} rounds × {a.steps} steps = "
                    f"{needed} positions, beyond {VARIANTS[v].model}'s max_position_embeddings {limit}"
                )
    a.cache = a.cache.expanduser().resolve()


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    if a.from_json:
        rerender(a.from_json, a.out, a.readme)
        return 0
    _check(p, a)
    try:
        engines = [parse_engine(s) for s in (a.engine or (CONTEXT_ENGINES if a.contexts else DEFAULT_ENGINES))]
    except ValueError as exc:
        p.error(str(exc))
    if len({e.name for e in engines}) != len(engines):
        p.error("engine names must be unique")
    config = {"threads": a.threads, "steps": a.steps, "rounds": a.rounds}
    if a.contexts:
        config |= {"contexts": a.contexts, "warmup": a.warmup, "rss_steps": a.rss_steps}
        config["prefill_rounds"] = a.prefill_rounds
    else:
        config["prompt"] = a.prompt
    data: dict[str, Any] = {
        "model": "; ".join(f"{VARIANTS[v].model} ({VARIANTS[v].description})" for v in a.variant),
        "config": config,
        "engines": [e.to_dict() for e in engines],
        "precisions": [],
        "skipped": {},
    }
    run = start_run(CONTEXT_SUITE if a.contexts else SUITE)
    for variant in a.variant:
        for precision in [q for q in PRECISIONS if q in (a.precisions or PRECISIONS)]:
            why = build_ir(precision, variant, a)
            if why:
                progress(f"{precision} {variant}: skipped: {why}")
                data["skipped"][f"{precision} {variant}"] = why
                continue
            measure = run_contexts if a.contexts else run_precision
            data["precisions"].append(measure(precision, variant, engines, a))
            write_results(a.out, a.name, run, data, markdown, plots)  # a killed run keeps what it measured
    doc = write_results(a.out, a.name, run, data, markdown, plots)
    if a.readme:
        rewrite_readme(doc)
    for entry in data["precisions"]:
        for t in _reporter(doc).targets(entry):
            print(f"{t['status']:4}  {t['target']}: {t['detail']}")
    progress(f"done in {doc['seconds'] / 60:.0f} min; wrote {a.out / (a.name + '.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

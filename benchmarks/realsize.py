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

The IRs come from ``realsize_build.py`` (torch + optimum-intel, in a venv of their own): give that
venv's Python as ``--optimum-python`` to build missing precisions, or build them beforehand.
Everything runs on ortstate's public API (``ortstate.convert``, ``StatefulSession``,
``ortstate.generate.Generator``), so it measures whatever converter ``import ortstate`` gives.

Real-size runs need GBs of RAM: on a shared machine, hold a lock around the whole run::

    flock /tmp/realsize.lock python benchmarks/realsize.py --cache DIR --optimum-python ~/venvs/optimum/bin/python

Writes ``benchmarks/results/NAME.json``, ``NAME.md`` and ``NAME.png`` (``--name``, default ``realsize``)
and, with ``--readme``, the section between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` of
``benchmarks/README.md``. Timings are informative: the exit code is 0 whatever they say.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The environment the measured processes get: taken before ortstate is imported. onnxruntime_extensions
# sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in os.environ when imported (ortstate's runtime puts
# it back); children inheriting it would run onnx on pure-Python protobuf, which is not what a user gets.
CHILD_ENV = dict(os.environ)
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import realsize_report  # noqa: E402
import report  # noqa: E402
from realsize_build import DEFAULT_CACHE, MODEL, PRECISIONS, ir_dir, ir_ready  # noqa: E402
from realsize_engines import DEFAULT_ENGINES, Engine, parse_engine  # noqa: E402

from ortstate.bench import machine_info, plot_unavailable  # noqa: E402

RESULTS = HERE / "results"
CHILD = HERE / "realsize_child.py"
SCHEMA = "ortstate.realsize/1"


def progress(msg: str) -> None:
    print(f"[realsize {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _dir_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / 2**20


def run_child(args: list[str], timeout: float) -> dict[str, Any]:
    """Run a measuring process; its JSON result, or ``{"error": ...}`` when it failed (OOM kills too)."""
    cmd = [sys.executable, str(CHILD), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=CHILD_ENV)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    sys.stderr.write(proc.stderr)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
        return {"error": f"{how}: {last[:300]}"}
    return json.loads(lines[-1])


def _common(a: argparse.Namespace, ir: Path) -> list[str]:
    return ["--ir", str(ir), "--threads", str(a.threads), "--prompt", str(a.prompt), "--steps", str(a.steps)]


def run_precision(precision: str, engines: list[Engine], a: argparse.Namespace) -> dict[str, Any]:
    """Everything measured for one precision (ONNX files are deleted afterwards unless ``--keep-onnx``)."""
    ir = ir_dir(a.cache, precision)
    entry: dict[str, Any] = {"precision": precision, "engines": [e.to_dict() for e in engines], "errors": []}
    entry["ir_bin_mib"] = (ir / "openvino_model.bin").stat().st_size / 2**20
    entry["load"], entry["conversions"], load_start = {}, {}, os.getloadavg()[0]
    work = a.cache / "onnx" / precision
    shutil.rmtree(work, ignore_errors=True)
    onnx: dict[str, Path] = {}
    by_key: dict[str, str] = {}
    for e in engines:
        if e.kind != "ortstate":
            continue
        if e.conversion_key in by_key:  # same conversion, another form: share the file
            onnx[e.name] = onnx[by_key[e.conversion_key]]
            entry["conversions"][e.name] = {
                **entry["conversions"][by_key[e.conversion_key]],
                "shared_with": by_key[e.conversion_key],
            }
            continue
        out = work / e.name / "model.onnx"
        out.parent.mkdir(parents=True)
        progress(f"{precision}: converting for {e.name} ({e.convert or 'defaults'})")
        conv = run_child(
            ["convert", "--ir", str(ir), "--onnx", str(out), "--convert-kwargs", json.dumps(e.convert)], a.timeout
        )
        if "error" not in conv:
            conv["onnx_mib"] = _dir_mib(out.parent)
            onnx[e.name], by_key[e.conversion_key] = out, e.name
            progress(
                f"{precision}: {e.name}: {conv['seconds']:.1f} s, peak RSS {conv['peak_rss_mib']:,.0f} MiB, "
                f"ONNX {conv['onnx_mib']:,.0f} MiB"
            )
        else:
            entry["errors"].append(f"convert for {e.name}: {conv['error']}")
        entry["conversions"][e.name] = conv
    runnable = [e for e in engines if e.kind != "ortstate" or e.name in onnx]
    if not a.no_load:
        for e in runnable:
            progress(f"{precision}: load + run of {e.name} in its own process")
            extra = ["--onnx", str(onnx[e.name])] if e.name in onnx else []
            res = run_child(["load", *_common(a, ir), "--engine", json.dumps(e.to_dict()), *extra], a.timeout)
            if "error" in res:
                entry["errors"].append(f"load of {e.name}: {res['error']}")
            else:
                progress(f"{precision}: {e.name}: load {res['load_s']:.1f} s, peak RSS {res['peak_rss_mib']:,.0f} MiB")
            entry["load"][e.name] = res
    progress(f"{precision}: speed, {len(runnable)} engines in one process, {a.rounds} rounds")
    args = ["speed", *_common(a, ir), "--rounds", str(a.rounds)]
    for e in runnable:
        args += ["--engine", json.dumps(e.to_dict())]
        if e.name in onnx:
            args += ["--onnx-of", f"{e.name}={onnx[e.name]}"]
    entry["speed"] = run_child(args, a.timeout)
    if "error" in entry["speed"]:
        entry["errors"].append(f"speed: {entry['speed'].pop('error')}")
    if not a.keep_onnx:
        shutil.rmtree(work, ignore_errors=True)
    entry["loadavg"] = [round(load_start, 2), round(os.getloadavg()[0], 2)]
    return entry


def _build(precision: str, a: argparse.Namespace) -> str | None:
    """Build a missing IR with the optimum venv's Python; None when ready, else why not."""
    if ir_ready(a.cache, precision):
        return None
    if not a.optimum_python:
        return f"IR not built in {ir_dir(a.cache, precision)}: run realsize_build.py, or pass --optimum-python"
    progress(f"{precision}: building the IR with {a.optimum_python}")
    cmd = [a.optimum_python, str(HERE / "realsize_build.py"), "--cache", str(a.cache), precision]
    done = subprocess.run(cmd, env=CHILD_ENV)
    return None if done.returncode == 0 and ir_ready(a.cache, precision) else f"IR build failed ({done.returncode})"


def _ortstate_source(module: Any) -> str:
    """ortstate's version, and the git branch and commit of its checkout when it is one."""
    where = Path(module.__file__).parent.parent
    text = module.__version__
    try:
        git = ["git", "-C", str(where)]
        branch = subprocess.run([*git, "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True, text=True, check=True)
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        text += f" ({branch.stdout.strip()} {commit.stdout.strip()}{', modified' if dirty.stdout.strip() else ''})"
    except (OSError, subprocess.CalledProcessError):
        pass
    return text


def write(doc: dict[str, Any], out: Path, name: str, readme: bool) -> None:
    """JSON, markdown and plot; the README section when asked."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    image = None
    if not plot_unavailable() and doc["precisions"]:
        realsize_report.plot(doc, out / f"{name}.png")
        image = f"{name}.png"
    (out / f"{name}.md").write_text(f"# Real-size benchmark: {name}\n\n" + realsize_report.markdown(doc, image) + "\n")
    if readme:
        body = realsize_report.markdown(doc, f"results/{image}" if image else None)
        readme_path = HERE / "README.md"
        if not report.rewrite_readme(readme_path, body, name):  # a new result name: a section of its own
            section = f"\n### Real-size results: `{name}`\n\n<!-- {name}:start -->\n{body}\n<!-- {name}:end -->\n"
            readme_path.write_text(readme_path.read_text(encoding="utf-8") + section, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("precisions", nargs="*", metavar="PRECISION", help=f"any of {', '.join(PRECISIONS)} (default: all)")
    p.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help=f"IRs and scratch ONNX files (default {DEFAULT_CACHE})"
    )
    p.add_argument("--optimum-python", help="Python of a venv with torch + optimum-intel, to build missing IRs")
    p.add_argument(
        "--engine",
        action="append",
        help=f"engines to run (repeatable; default {' '.join(DEFAULT_ENGINES)}); NAME:key=value,... adds an "
        "ortstate engine whose keys go to ortstate.convert (form=... to StatefulSession)",
    )
    p.add_argument("--threads", type=int, default=2, help="intra-op threads of every runtime (default 2)")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens (default 32)")
    p.add_argument("--steps", type=int, default=64, help="decode steps after the prefill (default 64)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per engine (default 5)")
    p.add_argument("--no-load", action="store_true", help="skip the per-engine load/RSS processes")
    p.add_argument("--keep-onnx", action="store_true", help="keep the converted models in CACHE/onnx")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per measuring process (default 3600)")
    p.add_argument("--name", default="realsize", help="result file stem (default realsize)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    p.add_argument(
        "--readme",
        action="store_true",
        help="write the results into benchmarks/README.md (between <!-- NAME:start/end --> markers; "
        "appended as a new section when they are missing)",
    )
    p.add_argument("--from-json", type=Path, metavar="NAME.json", help="only re-render the report of an earlier run")
    a = p.parse_args(argv)
    if a.from_json:
        write(json.loads(a.from_json.read_text(encoding="utf-8")), a.out, a.from_json.stem, a.readme)
        return 0
    unknown = sorted(set(a.precisions) - set(PRECISIONS))
    if unknown:
        p.error(f"unknown precision {', '.join(unknown)}: choose from {', '.join(PRECISIONS)}")
    try:
        engines = [parse_engine(s) for s in (a.engine or DEFAULT_ENGINES)]
    except ValueError as exc:
        p.error(str(exc))
    if len({e.name for e in engines}) != len(engines):
        p.error("engine names must be unique")
    a.cache = a.cache.expanduser().resolve()
    import ortstate

    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "model": f"{MODEL} (Qwen2-0.5B shape, random weights)",
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "ortstate": _ortstate_source(ortstate),
        "config": {"threads": a.threads, "prompt": a.prompt, "steps": a.steps, "rounds": a.rounds},
        "engines": [e.to_dict() for e in engines],
        "precisions": [],
        "skipped": {},
        "seconds": 0.0,
    }
    started = time.time()
    for precision in [q for q in PRECISIONS if q in (a.precisions or PRECISIONS)]:
        why = _build(precision, a)
        if why:
            progress(f"{precision}: skipped: {why}")
            doc["skipped"][precision] = why
            continue
        doc["precisions"].append(run_precision(precision, engines, a))
        doc["seconds"] = time.time() - started
        write(doc, a.out, a.name, a.readme)  # after every precision: a killed run keeps what it measured
    doc["seconds"] = time.time() - started
    write(doc, a.out, a.name, a.readme)
    for entry in doc["precisions"]:
        for t in realsize_report.targets(entry):
            print(f"{t['status']:4}  {t['target']}: {t['detail']}")
    progress(f"done in {doc['seconds'] / 60:.0f} min; wrote {a.out / (a.name + '.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

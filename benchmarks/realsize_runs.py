"""The real-size benchmark's runs for one model and precision, each measurement in a process of its own.

``realsize.py`` (the command line and the report files) calls :func:`run_precision` (issue 12: sizes,
conversion, memory, speed at a 32-token prompt) or :func:`run_contexts` (issue 19: prefill and decode
at each context length, peak RSS at the longest); both convert the IR once per distinct ortstate
conversion and start ``realsize_child.py`` for every measurement.

Import this module before ortstate: :data:`CHILD_ENV` is the environment the measured processes get,
taken at import. onnxruntime_extensions sets ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` in
``os.environ`` when imported (ortstate's runtime puts it back); children inheriting it would run onnx
on pure-Python protobuf, which is not what a user gets.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import child_command, child_env, loadavg
from benchmarks.realsize_build import VARIANTS, ir_dir, ir_ready, model_dir
from benchmarks.realsize_engines import Engine

CHILD = "realsize_child"

__all__ = ["build_ir", "progress", "run_child", "run_contexts", "run_precision"]


def progress(msg: str) -> None:
    print(f"[realsize {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _dir_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / 2**20


def run_child(args: list[str], timeout: float, child: str = CHILD) -> dict[str, Any]:
    """Run a measuring process (the module ``benchmarks.CHILD``), its progress (stderr) shown as it comes;
    its JSON result (the last line of its stdout), or ``{"error": ...}`` when it failed (OOM kills too)."""
    cmd = child_command(child, *args)
    with tempfile.TemporaryFile(mode="w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True, env=child_env())
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        tail: list[str] = []
        try:
            for line in proc.stderr:  # type: ignore[union-attr]
                sys.stderr.write(line)
                tail = [*tail[-20:], line]
            code = proc.wait()
        finally:
            timed_out = not timer.is_alive()
            timer.cancel()
        out.seek(0)
        lines = out.read().strip().splitlines()
    if timed_out and code != 0:
        return {"error": f"timed out after {timeout:.0f} s"}
    if code != 0 or not lines:
        last = ([t.strip() for t in tail if t.strip()] or ["no output"])[-1]
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return {"error": f"{how}: {last[:300]}"}
    return json.loads(lines[-1])


def build_ir(precision: str, variant: str, a: argparse.Namespace) -> str | None:
    """Build a missing IR with the optimum venv's Python (``--optimum-python``); None when ready, else why not."""
    if ir_ready(a.cache, precision, variant):
        return None
    where = ir_dir(a.cache, precision, variant)
    if not a.optimum_python:
        return f"IR not built in {where}: run realsize_build.py --variant {variant}, or pass --optimum-python"
    progress(f"{precision} {variant}: building the IR with {a.optimum_python}")
    args = ["--cache", str(a.cache), "--variant", variant, precision]
    cmd = child_command("realsize_build", *args, python=a.optimum_python)
    done = subprocess.run(cmd, env=child_env())
    ok = done.returncode == 0 and ir_ready(a.cache, precision, variant)
    return None if ok else f"IR build failed ({done.returncode})"


def _tag(entry: dict[str, Any]) -> str:
    variant = entry.get("variant", "default")
    return entry["precision"] if variant == "default" else f"{entry['precision']} {variant}"


def _convert_all(ir: Path, work: Path, engines: list[Engine], entry: dict[str, Any], a: Any) -> dict[str, Path]:
    """Convert ``ir`` once per distinct conversion of the ortstate engines into ``work/ENGINE/``, each in a
    process of its own; fills ``entry["conversions"]``, returns each engine's ONNX path."""
    entry["conversions"] = {}
    shutil.rmtree(work, ignore_errors=True)
    onnx: dict[str, Path] = {}
    by_key: dict[str, str] = {}
    for e in engines:
        if e.kind != "ortstate":
            continue
        if e.conversion_key in by_key:  # same conversion, another form: share the file
            first = by_key[e.conversion_key]
            onnx[e.name] = onnx[first]
            entry["conversions"][e.name] = {**entry["conversions"][first], "shared_with": first}
            continue
        out = work / e.name / "model.onnx"
        out.parent.mkdir(parents=True)
        progress(f"{_tag(entry)}: converting for {e.name} ({e.convert or 'defaults'})")
        conv = run_child(
            ["convert", "--ir", str(ir), "--onnx", str(out), "--convert-kwargs", json.dumps(e.convert)], a.timeout
        )
        if "error" not in conv:
            conv["onnx_mib"] = _dir_mib(out.parent)
            onnx[e.name], by_key[e.conversion_key] = out, e.name
            progress(
                f"{_tag(entry)}: {e.name}: {conv['seconds']:.1f} s, peak RSS {conv['peak_rss_mib']:,.0f} MiB, "
                f"ONNX {conv['onnx_mib']:,.0f} MiB"
            )
        else:
            entry["errors"].append(f"convert for {e.name}: {conv['error']}")
        entry["conversions"][e.name] = conv
    return onnx


def _loads(ir: Path, engines: list[Engine], onnx: dict[str, Path], run: list[str], entry: dict, a: Any) -> None:
    """Each engine in a process of its own (``realsize_child.py load``, ``run``: its prompt and steps):
    load time, RSS after loading and peak RSS, into ``entry["load"]``."""
    entry["load"] = {}
    for e in engines:
        progress(f"{_tag(entry)}: load + run of {e.name} in its own process ({' '.join(run)})")
        extra = ["--onnx", str(onnx[e.name])] if e.name in onnx else []
        args = ["load", "--ir", str(ir), "--threads", str(a.threads), *run, "--engine", json.dumps(e.to_dict())]
        res = run_child([*args, *extra], a.timeout)
        if "error" in res:
            entry["errors"].append(f"load of {e.name}: {res['error']}")
        else:
            progress(f"{_tag(entry)}: {e.name}: load {res['load_s']:.1f} s, peak RSS {res['peak_rss_mib']:,.0f} MiB")
        entry["load"][e.name] = res


def _engine_args(engines: list[Engine], onnx: dict[str, Path]) -> list[str]:
    args = []
    for e in engines:
        args += ["--engine", json.dumps(e.to_dict())]
        if e.name in onnx:
            args += ["--onnx-of", f"{e.name}={onnx[e.name]}"]
    return args


def _start(precision: str, variant: str, engines: list[Engine], a: Any) -> tuple[dict[str, Any], Path]:
    ir = ir_dir(a.cache, precision, variant)
    config = json.loads((ir / "config.json").read_text())
    entry: dict[str, Any] = {"precision": precision, "variant": variant, "model": VARIANTS[variant].model}
    entry |= {"heads": config.get("num_attention_heads"), "kv_heads": config.get("num_key_value_heads")}
    entry |= {"engines": [e.to_dict() for e in engines], "errors": [], "loadavg_1_5_15": [loadavg()]}
    entry["ir_bin_mib"] = (ir / "openvino_model.bin").stat().st_size / 2**20
    return entry, ir


def _finish(entry: dict[str, Any], work: Path, a: Any) -> dict[str, Any]:
    if not a.keep_onnx:
        shutil.rmtree(work, ignore_errors=True)
    entry["loadavg_1_5_15"] = [entry["loadavg_1_5_15"][0], loadavg()]
    entry["loadavg"] = [load[0] for load in entry["loadavg_1_5_15"]]  # 1 min, start and end
    return entry


def run_precision(precision: str, variant: str, engines: list[Engine], a: argparse.Namespace) -> dict[str, Any]:
    """Everything issue 12 measures for one precision (ONNX files deleted afterwards unless ``--keep-onnx``)."""
    entry, ir = _start(precision, variant, engines, a)
    work = model_dir(a.cache, variant) / "onnx" / precision
    onnx = _convert_all(ir, work, engines, entry, a)
    runnable = [e for e in engines if e.kind != "ortstate" or e.name in onnx]
    run = ["--prompt", str(a.prompt), "--steps", str(a.steps)]
    if not a.no_load:
        _loads(ir, runnable, onnx, run, entry, a)
    progress(f"{_tag(entry)}: speed, {len(runnable)} engines in one process, {a.rounds} rounds")
    args = ["speed", "--ir", str(ir), "--threads", str(a.threads), *run, "--rounds", str(a.rounds)]
    entry["speed"] = run_child([*args, *_engine_args(runnable, onnx)], a.timeout)
    if "error" in entry["speed"]:
        entry["errors"].append(f"speed: {entry['speed'].pop('error')}")
    return _finish(entry, work, a)


def run_contexts(precision: str, variant: str, engines: list[Engine], a: argparse.Namespace) -> dict[str, Any]:
    """Issue 19 for one model and precision: prefill and decode at each context length (every engine in
    one process, ``realsize_child.py contexts``), then each engine's peak RSS over a prefill of the
    longest context and ``--rss-steps`` decode steps (a process each)."""
    entry, ir = _start(precision, variant, engines, a)
    work = model_dir(a.cache, variant) / "onnx" / precision
    onnx = _convert_all(ir, work, engines, entry, a)
    runnable = [e for e in engines if e.kind != "ortstate" or e.name in onnx]
    progress(f"{_tag(entry)}: contexts {a.contexts}, {len(runnable)} engines in one process, {a.rounds} rounds")
    args = ["contexts", "--ir", str(ir), "--threads", str(a.threads), "--contexts", ",".join(map(str, a.contexts))]
    args += ["--steps", str(a.steps), "--rounds", str(a.rounds), "--warmup", str(a.warmup)]
    args += ["--prefill-rounds", str(a.prefill_rounds)]
    res = run_child([*args, *_engine_args(runnable, onnx)], a.timeout)
    if "error" in res:
        entry["errors"].append(f"contexts: {res['error']}")
    entry["contexts"] = res.get("engines", {})
    entry["contexts_process"] = {"peak_rss_mib": res.get("peak_rss_mib"), "protobuf": res.get("protobuf")}
    if not a.no_load:
        _loads(ir, runnable, onnx, ["--prompt", str(max(a.contexts)), "--steps", str(a.rss_steps)], entry, a)
    return _finish(entry, work, a)

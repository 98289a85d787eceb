"""``ortstate serve`` under load on this machine: one server of the tiny 2-layer LSTM
(``models/lstm_2l_dynbatch``, the server's defaults) on 127.0.0.1, and ``ortstate serve --bench``
in another process driving 256 concurrent streams through the WebSocket API, several rounds.

Writes ``benchmarks/results/serve.json`` and ``serve.md`` (each round's steps/s, step latency p50
and p99 as the client sees it, the server's mean batch and its CPU seconds per 1,000 steps; the
machine, and the load average before and after) and prints one PASS/MISS line per target of issue
21. Run it on a quiet machine (server and client share its cores):

    python -m benchmarks serve                           # 5 rounds of 256 streams x 400 steps
    python -m benchmarks serve --rounds 1 --steps 20 --out /tmp/serve   # a smoke run
    python -m benchmarks serve --durable    # plain vs --durable servers, alternating rounds

With ``--durable`` it runs a plain server and a ``--durable`` one (its log in a temporary
directory on the same disk as the results) side by side, rounds alternating between them, and
writes ``serve-durable.json``/``.md`` with both and their ratio (issue 28's target: the durable
server's steps/s at least half the plain one's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.common import RESULTS, ROOT, conditions, start_run, write_results

MODEL = ROOT / "models" / "lstm_2l_dynbatch" / "model.xml"
# issue 21, 256 streams on 2 cores: aggregate steps/s, client p99 (ms), the server's mean batch
TARGETS = {"steps_per_s": 10_000, "p99_ms": 20.0, "mean_batch": 32}
_SUMMARY = re.compile(
    r"([\d,]+) steps/s, step latency p50 ([\d.]+) ms, p99 ([\d.]+) ms; the server's mean batch ([\d.]+)"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--streams", type=int, default=256, help="concurrent WebSocket streams (default 256)")
    parser.add_argument("--steps", type=int, default=400, help="steps of every stream per round (default 400)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    parser.add_argument("--durable", action="store_true", help="compare a plain server with a --durable one")
    args = parser.parse_args(argv)
    if args.durable:
        return _durable(args)
    run = start_run("serve")
    server, url = _start_server()
    rounds = []
    try:
        for k in range(args.rounds):
            cpu = _cpu_seconds(server.pid)
            rounds.append(_bench(url, args.streams, args.steps))
            rounds[-1]["server_cpu_ms_per_1000_steps"] = round(
                (_cpu_seconds(server.pid) - cpu) * 1e6 / (args.streams * args.steps), 1
            )
            print(f"serve: round {k + 1}/{args.rounds}: {rounds[-1]}", file=sys.stderr)
        stats = json.loads(urllib.request.urlopen(url + "/v1/stats", timeout=30).read())
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    data = {
        "model": str(MODEL.relative_to(ROOT)),
        "streams": args.streams,
        "steps": args.steps,
        "rounds": rounds,
        "server_stats": {k: stats[k] for k in ("step_p50_ms", "step_p99_ms", "run_p50_ms", "mean_batch", "steps")},
    }
    doc = write_results(args.out, "serve", run, data, markdown)
    print(markdown(doc))
    print("\n".join(_targets(rounds)))
    return 0


def _durable(args: argparse.Namespace) -> int:
    """Plain and ``--durable`` servers, rounds alternating; their steps/s side by side."""
    run = start_run("serve-durable")
    rounds: dict[str, list[dict]] = {"plain": [], "durable": []}
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out) as state:
        servers = {"plain": _start_server(), "durable": _start_server("--state-dir", state, "--durable")}
        try:
            for k in range(args.rounds):
                for kind, (_, url) in servers.items():
                    rounds[kind].append(_bench(url, args.streams, args.steps))
                    print(f"serve: {kind} round {k + 1}/{args.rounds}: {rounds[kind][-1]}", file=sys.stderr)
        finally:
            for server, _ in servers.values():
                server.send_signal(signal.SIGTERM)
                server.wait(60)
    ratio = median(d["steps_per_s"] / p["steps_per_s"] for p, d in zip(rounds["plain"], rounds["durable"]))
    data = {
        "model": str(MODEL.relative_to(ROOT)),
        "streams": args.streams,
        "steps": args.steps,
        "rounds": rounds,
        "durable_over_plain": round(ratio, 3),
    }
    doc = write_results(args.out, "serve-durable", run, data, durable_markdown)
    print(durable_markdown(doc))
    print(f"{'PASS' if ratio >= 0.5 else 'MISS'} durable_over_plain: {ratio:.2f} (target at least 0.5)")
    return 0


def durable_markdown(doc: dict[str, Any]) -> str:
    """Both servers' medians over the rounds, and the ratio of their steps/s."""
    data = doc["data"]
    lines = [
        f"# `ortstate serve --durable` vs plain: {data['streams']} streams × {data['steps']} steps, {data['model']}",
        "",
        conditions(doc) + " Servers and bench client on the same cores; rounds alternating.",
        "",
        "| server | steps/s (median) | step p50 ms | step p99 ms | server's mean batch |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for kind, done in data["rounds"].items():
        lines.append(
            f"| {kind} | {median(r['steps_per_s'] for r in done):,.0f} | {median(r['p50_ms'] for r in done):.2f} | "
            f"{median(r['p99_ms'] for r in done):.2f} | {median(r['mean_batch'] for r in done):.1f} |"
        )
    ratio = data["durable_over_plain"]
    lines += ["", f"durable / plain steps/s: **{ratio:.2f}×** (median of the rounds' ratios; target ≥ 0.5×).", ""]
    return "\n".join(lines)


def _start_server(*extra: str) -> tuple[subprocess.Popen, str]:
    """The server on 127.0.0.1 (a free port), once it has printed its URL."""
    command = [sys.executable, "-m", "ortstate", "serve", str(MODEL), "--port", "0", *extra]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    with selectors.DefaultSelector() as sel:
        sel.register(server.stdout, selectors.EVENT_READ)
        line = server.stdout.readline() if sel.select(60) else ""
    found = re.search(r" on (http://127\.0\.0\.1:\d+)", line)
    if not found:
        server.kill()
        raise SystemExit(f"serve: the server did not start: {line!r}")
    return server, found.group(1)


def _bench(url: str, streams: int, steps: int) -> dict:
    command = [sys.executable, "-m", "ortstate", "serve", "--bench", url, "--streams", str(streams)]
    out = subprocess.run(command + ["--steps", str(steps)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    found = _SUMMARY.search(out.stdout)
    if out.returncode or not found:
        raise SystemExit(f"serve: the bench failed: {out.stdout}{out.stderr}")
    rate, p50, p99, batch = found.groups()
    return {
        "steps_per_s": int(rate.replace(",", "")),
        "p50_ms": float(p50),
        "p99_ms": float(p99),
        "mean_batch": float(batch),
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux's /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def markdown(doc: dict[str, Any]) -> str:
    """Each round's figures, and the server's own over all rounds."""
    data = doc["data"]
    lines = [
        f"# `ortstate serve`: {data['streams']} streams × {data['steps']} steps, {data['model']}",
        "",
        conditions(doc) + " Server and bench client on the same cores.",
        "",
        "| round | steps/s | step p50 ms | step p99 ms | server's mean batch | server CPU ms / 1,000 steps |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for k, r in enumerate(data["rounds"], 1):
        lines.append(
            f"| {k} | {r['steps_per_s']:,} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['mean_batch']:.1f} | "
            f"{r['server_cpu_ms_per_1000_steps']} |"
        )
    s = data["server_stats"]
    lines += [
        "",
        f"The server's own `/v1/stats` over all rounds: a step (message in to reply out) p50 {s['step_p50_ms']} ms, "
        f"p99 {s['step_p99_ms']} ms; a batched run p50 {s['run_p50_ms']} ms.",
        "",
    ]
    return "\n".join(lines)


def _targets(rounds: list[dict]) -> list[str]:
    out = []
    for key, target in TARGETS.items():
        values = [r[key] for r in rounds]
        mid = median(values)
        passed = mid <= target if key == "p99_ms" else mid >= target
        word = "at most" if key == "p99_ms" else "at least"
        out.append(
            f"{'PASS' if passed else 'MISS'} {key}: median {mid:,.1f} over {len(values)} rounds "
            f"(range {min(values):,.1f} – {max(values):,.1f}; target {word} {target:,})"
        )
    return out


if __name__ == "__main__":
    sys.exit(main())

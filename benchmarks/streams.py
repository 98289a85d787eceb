"""Many streams at once: a StreamPool against one request per stream (ortstate's StatefulSession
and OpenVINO's InferRequest), on a 2-layer LSTM of hidden 16 and of hidden 256 (batch-1 IRs made
with OpenVINO's opset API, as MakeStateful leaves them), 1 thread.

Writes ``benchmarks/results/streams.json``, ``streams.md`` and a plot per model,
``streams_h16.png`` and ``streams_h256.png`` (aggregate steps/s against streams), and prints one
PASS/MISS line per target of issue 20. Run it on a quiet machine:

    python -m benchmarks streams                         # 1, 64, 1024 streams, 100 steps each
    python -m benchmarks streams --counts 1,4 --steps 2 --out /tmp/streams   # a smoke run
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, conditions, start_run, write_results
from benchmarks.irs import lstm_ir
from ortstate.timing import plot_unavailable
from ortstate.timing.streams import StreamRow, measure_streams, plot_streams, streams_document, streams_table

# issue 20: at the most streams, the pool's steps/s over each one-request-per-stream way
TARGETS = {16: 20.0, 256: 4.0}
SINGLE = 1.3  # at 1 stream: the pool's step at most this many times a lone session's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1,64,1024", help="stream counts, comma-separated (default 1,64,1024)")
    parser.add_argument("--steps", type=int, default=100, help="steps of every stream per count (default 100)")
    parser.add_argument("--threads", type=int, default=1, help="threads of every runtime (default 1)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.counts.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    run = start_run("streams")
    data: dict[str, Any] = {"steps": args.steps, "threads": args.threads}
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for hidden in TARGETS:
            xml = lstm_ir(Path(tmp) / f"h{hidden}" / "model.xml", hidden, layers=2, input_size=16)
            progress = lambda m, hidden=hidden: print(f"streams: hidden {hidden}: {m}", file=sys.stderr)  # noqa: E731
            rows = measure_streams(xml, counts, args.steps, args.threads, progress=progress)
            data[f"lstm_h{hidden}_l2"] = streams_document(rows)
            lines += _targets(hidden, rows, max(counts))
    doc = write_results(args.out, "streams", run, data, markdown, plots)
    print(markdown(doc))
    print("\n".join(lines))
    return 0


def _models(data: dict[str, Any]) -> dict[str, list[StreamRow]]:
    """``{hidden size: rows}`` of each model the run measured."""
    return {
        key.removeprefix("lstm_h").split("_")[0]: [StreamRow(**r) for r in rows]
        for key, rows in data.items()
        if key.startswith("lstm_h")
    }


def markdown(doc: dict[str, Any]) -> str:
    """The run's conditions, then a table per model (see :func:`ortstate.timing.streams.streams_table`)."""
    data = doc["data"]
    parts = [
        "# Many streams: a StreamPool against one request per stream",
        conditions(doc) + f" {data['steps']} steps of every stream, {data['threads']} thread(s).",
    ]
    parts += [f"### 2-layer LSTM, hidden {h}\n\n{streams_table(rows)}" for h, rows in _models(data).items()]
    parts += [f"![aggregate steps/s against streams]({image})" for image in doc["images"]]
    return "\n\n".join(parts) + "\n"


def plots(doc: dict[str, Any], out: Path) -> list[str]:
    """Aggregate steps/s against streams, a plot per model (none without matplotlib)."""
    if plot_unavailable():
        return []
    for hidden, rows in _models(doc["data"]).items():
        plot_streams(rows, out / f"streams_h{hidden}.png", f"2-layer LSTM, hidden {hidden}")
    return [f"streams_h{hidden}.png" for hidden in _models(doc["data"])]


def _targets(hidden: int, rows: list, most: int) -> list[str]:
    by = {(r.runner, r.streams): r for r in rows}
    out = []
    for other in ("session", "openvino"):
        if ("pool", most) in by and (other, most) in by:
            ratio = by["pool", most].steps_per_s / by[other, most].steps_per_s
            verdict = "PASS" if ratio >= TARGETS[hidden] else "MISS"
            out.append(
                f"{verdict} hidden {hidden}, {most} streams: pool {ratio:.1f}x {other} (target {TARGETS[hidden]}x)"
            )
    if ("pool", 1) in by and ("session", 1) in by:
        ratio = by["session", 1].p50_us and by["pool", 1].p50_us / by["session", 1].p50_us
        verdict = "PASS" if ratio <= SINGLE else "MISS"
        out.append(
            f"{verdict} hidden {hidden}, 1 stream: pool step {ratio:.2f}x a lone session's (target <= {SINGLE}x)"
        )
    return out


if __name__ == "__main__":
    sys.exit(main())

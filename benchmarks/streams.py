"""Many streams at once: a StreamPool against one request per stream (ortstate's StatefulSession
and OpenVINO's InferRequest), on a 2-layer LSTM of hidden 16 and of hidden 256 (batch-1 IRs made
with OpenVINO's opset API, as MakeStateful leaves them), 1 thread.

Writes ``benchmarks/results/streams.json``, ``streams.md`` and ``streams.png`` (aggregate steps/s
against streams) and prints one PASS/MISS line per target of issue 20. Run it on a quiet machine:

    python -m benchmarks streams                         # 1, 64, 1024 streams, 100 steps each
    python -m benchmarks streams --counts 1,4 --steps 2 --out /tmp/streams   # a smoke run
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks.common import RESULTS, loadavg, machine, write_results
from benchmarks.irs import lstm_ir
from ortstate.timing.streams import measure_streams, plot_streams, streams_document, streams_table

# issue 20: at the most streams, the pool's steps/s over each one-request-per-stream way
TARGETS = {16: 20.0, 256: 4.0}
SINGLE = 1.3  # at 1 stream: the pool's step at most this many times a lone session's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1,64,1024")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.counts.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    document, tables, lines = {}, [], []
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for hidden in TARGETS:
            xml = lstm_ir(Path(tmp) / f"h{hidden}" / "model.xml", hidden, layers=2, input_size=16)
            progress = lambda m, hidden=hidden: print(f"streams: hidden {hidden}: {m}", file=sys.stderr)  # noqa: E731
            rows = measure_streams(xml, counts, args.steps, args.threads, progress=progress)
            document[f"lstm_h{hidden}_l2"] = streams_document(rows)
            tables.append(f"### 2-layer LSTM, hidden {hidden}\n\n{streams_table(rows)}\n")
            plot_streams(rows, args.out / f"streams_h{hidden}.png", f"2-layer LSTM, hidden {hidden}")
            lines += _targets(hidden, rows, max(counts))
    recorded = {"machine": machine(), "load_before": load_before, "load_after": loadavg()}
    document = {"steps": args.steps, "threads": args.threads, **document} | recorded
    write_results(args.out, "streams", document, "\n".join(tables))
    print("\n".join(tables))
    print("\n".join(lines))
    return 0


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

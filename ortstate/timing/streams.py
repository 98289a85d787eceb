"""Many streams at once (``ortstate bench MODEL --streams 1,64,1024``): aggregate steps/s and
per-step latency of N independent streams of one stateful IR, served three ways:

- ``pool``: one :class:`~ortstate.StreamPool`; a tick steps every stream once in one batched run;
  a stream's step latency is the tick's;
- ``session``: one ``StatefulSession`` request per stream (ortstate's way without a pool), each
  stream stepped in turn;
- ``openvino``: one OpenVINO ``InferRequest`` per stream (OpenVINO's way), each stepped in turn.

Every stream is fed its own random inputs (dynamic dims 1), made once; each round starts every
stream from its initial state (zeros of one row where the model's batch is dynamic). Threads:
ONNX Runtime ``intra_op_num_threads=T``, OpenVINO ``INFERENCE_NUM_THREADS=T``, f32.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..extras import install_hint
from ..runtime import StatefulSession
from ..streams import SlotPool, StreamPool
from .runners import session_options

__all__ = [
    "STREAM_RUNNERS",
    "StreamRow",
    "measure_streams",
    "openvino_unavailable",
    "plot_streams",
    "streams_document",
    "streams_table",
]

STREAM_RUNNERS = ("pool", "session", "openvino")
_SEED = 20


@dataclass(frozen=True)
class StreamRow:
    """One runner at one stream count: aggregate stream steps per second, and a stream's step
    latency (µs; the pool's is its tick's)."""

    runner: str
    streams: int
    steps_per_s: float
    p50_us: float
    p99_us: float


def _stream_feeds(pool: SlotPool, count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(_SEED)
    out = []
    for _ in range(count):
        feeds = {}
        for spec in pool.layout.inputs:
            shape = [1 if d is None else d for d in spec.dims]
            values = rng.normal(0, 0.5, shape) if spec.dtype.kind == "f" else np.zeros(shape)
            feeds[spec.name] = values.astype(spec.dtype)
        out.append(feeds)
    return out


def _time(ticks: int, tick: Callable[[], None], per_tick: int, latencies: list[float]) -> float:
    start = time.perf_counter()
    for _ in range(ticks):
        t0 = time.perf_counter()
        tick()
        latencies.extend([time.perf_counter() - t0] * per_tick)
    return time.perf_counter() - start


def _pool_round(xml: Path, count: int, ticks: int, threads: int, latencies: list[float]) -> float:
    pool = StreamPool(xml, slots=count, sess_options=session_options(threads))
    feeds = dict(zip([pool.open() for _ in range(count)], _stream_feeds(pool, count)))
    pool.step(feeds)  # warm-up
    return _time(ticks, lambda: pool.step(feeds), count, latencies)


def _lone_round(xml: Path, count: int, ticks: int, threads: int, latencies: list[float], openvino: bool) -> float:
    pool = StreamPool(xml, slots=1)  # its layout: one stream's feeds and initial state
    feeds = _stream_feeds(pool, count)
    starts = [np.zeros(s.shape, s.dtype) for s in pool.layout.states]
    requests = _ov_requests(xml, count, threads) if openvino else _session_requests(xml, count, threads)
    for request, start in zip(requests, [starts] * count):
        for var, value in zip(request.query_state(), start):
            if 0 in np.shape(_state_of(var)):  # a dynamic batch starts empty: one row of zeros
                _set_state(var, value)
    steps = [functools.partial(r.infer, f) for r, f in zip(requests, feeds)]
    for step in steps:
        step()  # warm-up

    def each() -> None:
        for step in steps:
            t0 = time.perf_counter()
            step()
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    for _ in range(ticks):
        each()
    return time.perf_counter() - start


def _state_of(var: Any) -> Any:
    state = var.state
    return state.data if hasattr(state, "data") else state


def _set_state(var: Any, value: np.ndarray) -> None:
    if type(var).__module__.startswith("openvino"):  # OpenVINO's VariableState takes a Tensor
        import openvino as ov

        var.state = ov.Tensor(value)
    else:
        var.state = value


def _session_requests(xml: Path, count: int, threads: int) -> list[Any]:
    session = StatefulSession(xml, session_options(threads))
    return [session.create_infer_request() for _ in range(count)]


def _ov_requests(xml: Path, count: int, threads: int) -> list[Any]:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(str(xml)), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads}
    )
    return [compiled.create_infer_request() for _ in range(count)]


def openvino_unavailable() -> str | None:
    """Why OpenVINO's rows cannot be measured here (None when it is installed)."""
    if importlib.util.find_spec("openvino") is None:
        return f"openvino is not installed ({install_hint('verify')})"
    return None


def measure_streams(
    xml: Path,
    counts: Sequence[int],
    ticks: int,
    threads: int = 1,
    runners: Sequence[str] = STREAM_RUNNERS,
    progress: Callable[[str], None] | None = None,
) -> list[StreamRow]:
    """Time ``ticks`` steps of every stream, for each stream count and runner."""
    rows = []
    for count in counts:
        for runner in runners:
            if progress:
                progress(f"{runner}, {count} stream(s)")
            latencies: list[float] = []
            if runner == "pool":
                seconds = _pool_round(xml, count, ticks, threads, latencies)
            else:
                seconds = _lone_round(xml, count, ticks, threads, latencies, runner == "openvino")
            p50, p99 = np.percentile(np.array(latencies) * 1e6, [50, 99])
            rows.append(StreamRow(runner, count, count * ticks / seconds, float(p50), float(p99)))
    return rows


def streams_table(rows: Sequence[StreamRow]) -> str:
    """A markdown table: one line per stream count, each runner's steps/s and p50/p99, and the
    pool's throughput over each other runner's."""
    runners = list(dict.fromkeys(r.runner for r in rows))
    head = ["streams", *(f"{r} steps/s (p50/p99 µs)" for r in runners)]
    head += [f"pool ÷ {r}" for r in runners if r != "pool" and "pool" in runners]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for count in dict.fromkeys(r.streams for r in rows):
        by = {r.runner: r for r in rows if r.streams == count}
        cells = [str(count)]
        cells += [f"{by[r].steps_per_s:,.0f} ({by[r].p50_us:.0f}/{by[r].p99_us:.0f})" for r in runners]
        if "pool" in by:
            cells += [f"{by['pool'].steps_per_s / by[r].steps_per_s:.1f}×" for r in runners if r != "pool"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def streams_document(rows: Sequence[StreamRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def plot_streams(rows: Sequence[StreamRow], path: str | Path, title: str = "") -> None:
    """Aggregate steps/s against streams, one line per runner (log-log), to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for runner in dict.fromkeys(r.runner for r in rows):
        mine = [r for r in rows if r.runner == runner]
        ax.plot([r.streams for r in mine], [r.steps_per_s for r in mine], marker="o", label=runner)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("streams")
    ax.set_ylabel("aggregate steps/s")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

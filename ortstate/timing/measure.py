"""Timing runners step by step over alternating rounds, and what the timings say (p50/p90/p99, ratios)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..progress import task
from .runners import LABELS, Runner
from .workloads import Workload

__all__ = ["OPENVINO_RUNNERS", "BenchResult", "RunnerStats", "measure"]


@dataclass
class RunnerStats:
    """One runner's per-step latencies (µs) over all rounds, or why it did not run."""

    name: str
    samples_us: np.ndarray = field(default_factory=lambda: np.empty(0))
    round_p50_us: list[float] = field(default_factory=list)
    skipped: str = ""

    def p(self, q: float) -> float:
        """The ``q``-th percentile in µs (NaN if skipped)."""
        return float(np.percentile(self.samples_us, q)) if self.samples_us.size else float("nan")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "label": LABELS.get(self.name, self.name)}
        if self.skipped:
            return out | {"status": "skipped", "reason": self.skipped}
        stats = {f"p{q}_us": round(self.p(q), 2) for q in (50, 90, 99)}
        return out | {
            "status": "ok",
            **stats,
            "mean_us": round(float(self.samples_us.mean()), 2),
            "samples": int(self.samples_us.size),
            "round_p50_us": [round(r, 2) for r in self.round_p50_us],
        }


OPENVINO_RUNNERS = ("openvino", "openvino-shared")


@dataclass
class BenchResult:
    """One workload measured with several runners.

    Attributes:
        model: the IR's path; ``label`` how to name it (``folder/file.xml``).
        precision: the weights' precision as the IR stores them (``f32``, ``int4 + int8``...).
    """

    workload: str
    model: str
    description: str
    threads: int
    steps: int
    rounds: int
    runners: list[RunnerStats]
    label: str = ""
    precision: str = ""

    def get(self, name: str) -> RunnerStats | None:
        """The runner's stats if it ran."""
        return next((r for r in self.runners if r.name == name and not r.skipped), None)

    def ratio(self, name: str, base: str) -> float | None:
        """p50 of ``name`` over p50 of ``base`` (None if either did not run)."""
        a, b = self.get(name), self.get(base)
        return None if a is None or b is None else a.p(50) / b.p(50)

    @property
    def openvino_best(self) -> str | None:
        """OpenVINO's fastest way here (lowest p50 of its runners that ran): what "× OpenVINO" compares to."""
        ran = [r for r in (self.get(n) for n in OPENVINO_RUNNERS) if r is not None]
        return min(ran, key=lambda r: r.p(50)).name if ran else None

    def vs_openvino(self, name: str) -> float | None:
        """p50 of ``name`` over OpenVINO's fastest way (None without OpenVINO)."""
        best = self.openvino_best
        return None if best is None else self.ratio(name, best)

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for r in self.runners:
            row = r.to_dict()
            if not r.skipped:
                ratios = {
                    "vs_floor": self.ratio(r.name, "floor"),
                    "vs_openvino": self.vs_openvino(r.name),
                    "vs_openvino_infer": self.ratio(r.name, "openvino"),
                }
                row |= {k: None if v is None else round(v, 3) for k, v in ratios.items()}
            rows.append(row)
        keys = ("workload", "model", "label", "precision", "description", "threads", "steps", "rounds")
        return {k: getattr(self, k) for k in keys} | {"openvino_best": self.openvino_best, "runners": rows}


def measure(
    workload: Workload,
    runners: Sequence[Runner],
    rounds: int = 5,
    *,
    threads: int = 1,
    skipped: dict[str, str] | None = None,
    warmup: int = 20,
    progress: Callable[[str], None] | None = None,
) -> BenchResult:
    """Time every step of ``workload`` with each runner, ``rounds`` times, alternating the order.

    Before the first round each runner is warmed up (prefill + up to ``warmup`` steps). Every round
    resets each runner and replays the prefill untimed, so all rounds time the same positions.
    """
    samples: dict[str, list[np.ndarray]] = {r.name: [] for r in runners}
    for runner in runners:
        runner.reset()
        for feeds in workload.prefill + workload.steps[:warmup]:
            runner.step(feeds)
    clock = time.perf_counter_ns
    with task(f"{workload.name}: rounds x runners", total=rounds * len(runners)) as bar:
        for k in range(rounds):
            if progress:
                progress(f"{workload.name}: round {k + 1}/{rounds}")
            for runner in runners if k % 2 == 0 else list(runners)[::-1]:
                runner.reset()
                for feeds in workload.prefill:
                    runner.step(feeds)
                times = np.empty(len(workload.steps))
                for i, feeds in enumerate(workload.steps):
                    start = clock()
                    runner.step(feeds)
                    times[i] = clock() - start
                samples[runner.name].append(times / 1e3)
                bar.update()
    stats = [RunnerStats(n, np.concatenate(s), [float(np.median(x)) for x in s]) for n, s in samples.items()]
    stats += [RunnerStats(n, skipped=why) for n, why in (skipped or {}).items()]
    order = list(LABELS)
    stats.sort(key=lambda s: order.index(s.name) if s.name in order else len(order))
    return BenchResult(
        workload.name,
        str(workload.xml),
        workload.description,
        threads,
        len(workload.steps),
        rounds,
        stats,
        workload.model,
        workload.precision,
    )

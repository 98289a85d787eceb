"""Timing runners step by step over alternating rounds, and what the timings say (p50/p90/p99, ratios)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .runners import LABELS, Runner
from .workloads import Workload

__all__ = ["BenchResult", "RunnerStats", "measure"]


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


@dataclass
class BenchResult:
    """One workload measured with several runners."""

    workload: str
    model: str
    description: str
    threads: int
    steps: int
    rounds: int
    runners: list[RunnerStats]

    def get(self, name: str) -> RunnerStats | None:
        """The runner's stats if it ran."""
        return next((r for r in self.runners if r.name == name and not r.skipped), None)

    def ratio(self, name: str, base: str) -> float | None:
        """p50 of ``name`` over p50 of ``base`` (None if either did not run)."""
        a, b = self.get(name), self.get(base)
        return None if a is None or b is None else a.p(50) / b.p(50)

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for r in self.runners:
            row = r.to_dict()
            if not r.skipped:
                for key, base in (("vs_floor", "floor"), ("vs_openvino", "openvino")):
                    ratio = self.ratio(r.name, base)
                    row[key] = None if ratio is None else round(ratio, 3)
            rows.append(row)
        keys = ("workload", "model", "description", "threads", "steps", "rounds")
        return {k: getattr(self, k) for k in keys} | {"runners": rows}


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
    stats = [RunnerStats(n, np.concatenate(s), [float(np.median(x)) for x in s]) for n, s in samples.items()]
    stats += [RunnerStats(n, skipped=why) for n, why in (skipped or {}).items()]
    order = list(LABELS)
    stats.sort(key=lambda s: order.index(s.name) if s.name in order else len(order))
    return BenchResult(
        workload.name, str(workload.xml), workload.description, threads, len(workload.steps), rounds, stats
    )

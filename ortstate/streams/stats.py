"""What a pool reports about itself: streams, slots, runs, batch sizes and latencies."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["LATENCY_WINDOW", "PoolStats", "Recorder", "percentiles"]

LATENCY_WINDOW = 4096  # latencies kept for the percentiles: the most recent runs and ticks


@dataclass(frozen=True)
class PoolStats:
    """A pool's counters (latencies in seconds, over the most recent runs and ticks).

    Attributes:
        streams: open streams, parked ones included; parked: those parked.
        slots: the pool's size; state_bytes: the memory its state arrays take (all slots).
        runs: batched runs so far; steps: stream steps they made (steps / runs: the mean batch).
        max_batch: the largest batch run.
        run_p50, run_p99: one batched run's time.
        tick_p50, tick_p99: :meth:`~.pool.Pool.submit`'s ticks, from the first submission to the
            results (0 before any).
        kv_cache_bytes: a KV pool's budget for its caches (0: no KV caches); state_bytes then
            counts the positions its streams' caches hold; preempted: streams moved out of the
            arena to stay within it.
    """

    streams: int
    parked: int
    slots: int
    state_bytes: int
    runs: int
    steps: int
    max_batch: int
    run_p50: float
    run_p99: float
    tick_p50: float
    tick_p99: float
    kv_cache_bytes: int = 0
    preempted: int = 0

    @property
    def mean_batch(self) -> float:
        return self.steps / self.runs if self.runs else 0.0


def percentiles(values: Iterable[float]) -> tuple[float, float]:
    """The p50 and p99 of ``values`` (0, 0 for none)."""
    kept = np.fromiter(values, float)
    if not kept.size:
        return 0.0, 0.0
    p50, p99 = np.percentile(kept, [50, 99])
    return float(p50), float(p99)


class Recorder:
    """Counts runs as they happen."""

    def __init__(self) -> None:
        self.runs = 0
        self.steps = 0
        self.max_batch = 0
        self.latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)

    def run(self, batch: int, seconds: float) -> None:
        self.runs += 1
        self.steps += batch
        self.max_batch = max(self.max_batch, batch)
        self.latencies.append(seconds)

    def stats(self, streams: int, parked: int, slots: int, state_bytes: int, ticks: Iterable[float]) -> PoolStats:
        run = percentiles(self.latencies)
        tick = percentiles(ticks)
        return PoolStats(streams, parked, slots, state_bytes, self.runs, self.steps, self.max_batch, *run, *tick)

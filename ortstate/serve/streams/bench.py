"""``ortstate serve --bench URL``: N concurrent streams of a running server, K steps each, through its
WebSocket API; aggregate steps/s and a step's latency as a client sees it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ServeError
from .async_client import AsyncClient, AsyncStream

__all__ = ["BenchResult", "feeds_for", "run_bench"]


@dataclass(frozen=True)
class BenchResult:
    """What a bench run measured (latencies in milliseconds, from sending a step to its outputs)."""

    streams: int
    steps: int
    seconds: float
    p50_ms: float
    p99_ms: float
    mean_batch: float

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        return (
            f"{self.streams} streams × {self.steps // max(self.streams, 1)} steps: "
            f"{self.steps_per_second:,.0f} steps/s, step latency p50 {self.p50_ms:.2f} ms, "
            f"p99 {self.p99_ms:.2f} ms; the server's mean batch {self.mean_batch:.1f}"
        )


def feeds_for(inputs: list[dict[str, Any]], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One stream's feeds for the inputs ``/v1/model`` lists: any-size dims 1, floats ~N(0, 0.5),
    others zeros."""
    feeds = {}
    for spec in inputs:
        shape = [1 if d is None else d for d in spec["shape"]]
        dtype = np.dtype(spec["dtype"])
        if dtype.kind == "f":
            feeds[spec["name"]] = rng.normal(0, 0.5, shape).astype(dtype)
        else:
            feeds[spec["name"]] = np.zeros(shape, dtype)
    return feeds


async def run_bench(url: str, streams: int, steps: int, token: str | None = None, seed: int = 0) -> BenchResult:
    """Open ``streams`` streams on the server at ``url``, step each ``steps`` times concurrently,
    close them.

    Raises:
        ServeError: the server cannot be reached or refuses a stream or a step.
    """
    client = AsyncClient(url, token)
    feeds = feeds_for((await client.model())["inputs"], np.random.default_rng(seed))
    before = await client.stats()
    opened: list[AsyncStream] = []
    try:
        for _ in range(streams):  # one at a time: a refusal (a full server) stops here, said once
            opened.append(await client.open())
        latencies: list[float] = []

        async def drive(stream: AsyncStream) -> None:
            for _ in range(steps):
                start = time.perf_counter()
                await stream.step(feeds)
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(drive(s) for s in opened))
        seconds = time.perf_counter() - start
    finally:
        await asyncio.gather(*(s.close() for s in opened), return_exceptions=True)
    after = await client.stats()
    runs, served = after["runs"] - before["runs"], after["steps"] - before["steps"]
    if not latencies:
        raise ServeError("no step was made")
    p50, p99 = np.percentile(np.array(latencies), [50, 99]) * 1e3
    return BenchResult(streams, len(latencies), seconds, float(p50), float(p99), served / runs if runs else 0.0)

"""What a stream server reports about its model and its pool: ``/v1/model``'s description of the
model as one stream feeds it, and the pool's and the steps' figures in ``/v1/stats``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...runtime import numpy_dtype
from ...streams import SlotPool
from ...streams.stats import percentiles

__all__ = ["model_report", "pool_report"]


def pool_report(pool: SlotPool, latencies: Iterable[float]) -> dict[str, Any]:
    """The steps' latencies (``step_*``, as clients waited for them) and the pool's runs and ticks."""
    stats = pool.stats()
    step = percentiles(latencies)
    return {
        "step_p50_ms": round(step[0] * 1e3, 3),
        "step_p99_ms": round(step[1] * 1e3, 3),
        "runs": stats.runs,
        "mean_batch": round(stats.mean_batch, 3),
        "max_batch": stats.max_batch,
        "run_p50_ms": round(stats.run_p50 * 1e3, 3),
        "run_p99_ms": round(stats.run_p99 * 1e3, 3),
        "tick_p50_ms": round(stats.tick_p50 * 1e3, 3),
        "tick_p99_ms": round(stats.tick_p99 * 1e3, 3),
    }


def model_report(pool: SlotPool) -> dict[str, Any]:
    """The model as one stream feeds it: inputs (1 along the batch axis, null: any size), outputs
    and variables."""
    layout, loaded = pool.layout, pool.loaded
    types = {o.name: numpy_dtype(o.type) for o in loaded.outputs}
    return {
        "inputs": [{"name": i.name, "dtype": i.dtype.name, "shape": list(i.dims)} for i in layout.inputs],
        "outputs": [
            {"name": n, "dtype": getattr(types.get(n), "name", None), "batch_axis": a}
            for n, a in layout.outputs.items()
        ],
        "variables": [{"id": s.var.id, "dtype": s.dtype.name, "shape": list(s.shape)} for s in layout.states],
    }

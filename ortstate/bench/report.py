"""How benchmark results are shown: a markdown table, a JSON document, a PNG plot, the machine."""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from .measure import BenchResult
from .runners import LABELS

__all__ = ["SCHEMA", "document", "machine_info", "markdown_table", "plot_results", "plot_unavailable"]

SCHEMA = "ortstate.bench/1"


def machine_info() -> dict[str, Any]:
    """CPU model, cores, and the versions that matter."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from .. import __version__

    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}
    info["ortstate"] = __version__
    for dist in ("onnxruntime", "onnxruntime-extensions", "onnx", "openvino", "numpy"):
        try:
            info[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[dist] = None
    return info


def document(results: Sequence[BenchResult], **extra: Any) -> dict[str, Any]:
    """The JSON ``ortstate bench --json`` writes: schema, machine, one entry per workload."""
    return {"schema": SCHEMA, "machine": machine_info(), **extra, "results": [r.to_dict() for r in results]}


def _ratio(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.2f}×"


def markdown_table(result: BenchResult) -> str:
    """Runners as rows: p50/p90/p99 in µs and the p50 ratios to the floor and to OpenVINO."""
    lines = [
        "| runner | p50 µs | p90 µs | p99 µs | × floor | × OpenVINO |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result.runners:
        label = LABELS.get(r.name, r.name)
        if r.skipped:
            lines.append(f"| {label} | skipped: {r.skipped.replace('|', '/')} | | | | |")
            continue
        cells = [f"{r.p(q):.1f}" for q in (50, 90, 99)]
        ratios = [_ratio(result.ratio(r.name, base)) for base in ("floor", "openvino")]
        lines.append(f"| {label} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    return "\n".join(lines)


def plot_unavailable() -> str | None:
    """Why plots can't be drawn here (None when matplotlib imports)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "plots need matplotlib: pip install 'ortstate[plot]'"
    return None


def plot_results(results: Sequence[BenchResult], path: str | os.PathLike[str], title: str = "") -> None:
    """Grouped bars of p50 per runner (whiskers to p90), one group per result. Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in LABELS if any(r.get(n) for r in results)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(results) + 3), 4.2))
    width = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        xs, p50, err = [], [], []
        for i, result in enumerate(results):
            stats = result.get(name)
            if stats is not None:
                xs.append(i + (j - (len(names) - 1) / 2) * width)
                p50.append(stats.p(50))
                err.append(stats.p(90) - stats.p(50))
        ax.bar(xs, p50, width, yerr=[[0] * len(err), err], capsize=2, label=LABELS[name])
    ax.set_xticks(range(len(results)), [r.workload for r in results], rotation=15 if len(results) > 3 else 0)
    ax.set_ylabel("µs per step (p50, whisker p90)")
    ax.set_title(title or (results[0].workload if len(results) == 1 else "per-step latency"))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

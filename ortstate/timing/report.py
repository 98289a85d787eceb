"""How benchmark results are shown: a markdown table, a JSON document, a PNG plot, the machine."""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import OutputFileError
from ..extras import install_hint
from ..output_files import write_file
from ..runtime.cpu import cpu_fields, cpu_flags
from ..version import __version__
from .measure import BenchResult
from .runners import LABELS

__all__ = [
    "SCHEMA",
    "cpu_name",
    "document",
    "isa_flags",
    "machine_info",
    "markdown_table",
    "plot_figure",
    "plot_results",
    "plot_unavailable",
]

SCHEMA = "ortstate.bench/1"


_ISA_FLAGS = ("avx", "amx", "fma", "f16c", "vnni")


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what the platform says of it."""
    return cpu_fields().get("model name") or platform.processor() or platform.machine()


def isa_flags() -> list[str]:
    """The CPU's vector extensions kernels pick their paths by (AVX*, AMX, FMA, F16C, VNNI), sorted:
    what moves one machine's timings against another's."""
    return sorted(f for f in cpu_flags() if f.startswith(_ISA_FLAGS))


def machine_info() -> dict[str, Any]:
    """CPU model, cores, its vector extensions (from /proc/cpuinfo's flags), and the versions that
    matter."""
    info: dict[str, Any] = {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()}
    info["isa"] = " ".join(isa_flags()) or None  # the vector extensions kernels pick their paths by
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
    """Runners as rows: p50/p90/p99 in µs and the p50 ratios to the floor, to OpenVINO's fastest way
    (the headline) and to its plain ``infer(feeds)``; a line under the table names the bases."""
    lines = [
        "| runner | p50 µs | p90 µs | p99 µs | × floor | × OpenVINO | × `infer(feeds)` |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result.runners:
        label = LABELS.get(r.name, r.name)
        if r.skipped:
            lines.append(f"| {label} | skipped: {r.skipped.replace('|', '/')} | | | | | |")
            continue
        cells = [f"{r.p(q):.1f}" for q in (50, 90, 99)]
        ratios = [result.ratio(r.name, "floor"), result.vs_openvino(r.name), result.ratio(r.name, "openvino")]
        lines.append(f"| {label} | {' | '.join(cells)} | {' | '.join(map(_ratio, ratios))} |")
    best = result.openvino_best
    if best is not None:
        lines += [
            "",
            f"× floor, × OpenVINO: p50 over the floor's and over OpenVINO's fastest way here ({LABELS[best]}); "
            "× `infer(feeds)`: over OpenVINO's plain `infer(feeds)`.",
        ]
    return "\n".join(lines)


def plot_unavailable(path: str | os.PathLike[str] | None = None) -> str | None:
    """Why a plot can't be drawn here (into ``path``, when given: its suffix names the format), or
    None when it can: matplotlib imports and writes that format."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return f"plots need matplotlib: {install_hint('plot')}"
    if path is None:
        return None
    kind = _plot_format(path)
    known = FigureCanvasBase.get_supported_filetypes()
    if kind not in known:
        return f"{path}: matplotlib writes no .{kind} files (it writes {', '.join(sorted(known))})"
    return None


def _plot_format(path: str | os.PathLike[str]) -> str:
    return Path(path).suffix[1:].lower() or "png"


def _plain(label: str) -> str:
    """A runner's label without markdown."""
    return label.replace("`", "")


def _subtitle(results: Sequence[BenchResult]) -> str:
    """What the numbers depend on: weights (one result), precision, threads, machine, versions."""
    machine = machine_info()
    precision = results[0].precision if len(results) == 1 and results[0].precision else ""
    threads = sorted({r.threads for r in results})
    parts = [
        (f"weights {precision}, " if precision else "") + "OpenVINO at f32 precision",
        f"{'/'.join(map(str, threads))} thread{'s' * (threads != [1])}",
        f"{machine['cpu']} ({machine['cores']} cores)",
        f"onnxruntime {machine['onnxruntime']}" + (f", openvino {machine['openvino']}" if machine["openvino"] else ""),
    ]
    return "; ".join(parts)


def _unit(results: Sequence[BenchResult]) -> tuple[str, float]:
    """µs, or ms when the slowest p50 reaches 1 ms (16,000 µs reads as 16 ms)."""
    top = max((s.p(50) for r in results for s in r.runners if not s.skipped), default=0.0)
    return ("ms", 1e3) if top >= 1000 else ("µs", 1.0)


_COLORS = {"openvino": "C1", "floor": "0.55", "torch": "C2"}


def _value(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def plot_results(results: Sequence[BenchResult], path: str | os.PathLike[str], title: str = "") -> None:
    """Write :func:`plot_figure` as a PNG (or the format ``path``'s suffix names: svg, pdf...).
    Needs matplotlib.

    Raises:
        OutputFileError: ``path`` cannot be written (see :mod:`ortstate.output_files`), or names a
            format matplotlib does not write.
    """
    problem = plot_unavailable(path)
    if problem:
        raise OutputFileError(problem)
    import matplotlib.pyplot as plt

    fig = plot_figure(results, title)
    kind = _plot_format(path)
    try:
        write_file(path, lambda f: fig.savefig(f, format=kind, dpi=110, bbox_inches="tight"))
    finally:
        plt.close(fig)


def plot_figure(results: Sequence[BenchResult], title: str = "") -> Any:
    """p50 per runner (whisker to p90), labelled with its value; one result: horizontal bars, the
    runners named beside them; several: grouped bars, one group per result, the legend below. The
    title names the model(s) and workload, the subtitle the precision, threads and machine; the
    unit is ms once a p50 reaches 1 ms. Needs matplotlib; returns its ``Figure``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in LABELS if any(r.get(n) for r in results)]
    unit, scale = _unit(results)
    if len(results) == 1:
        (result,) = results
        stats = [result.get(n) for n in names]
        fig, ax = plt.subplots(figsize=(9, 1.2 + 0.55 * len(names)))
        p50 = [s.p(50) / scale for s in stats if s]
        p90 = [s.p(90) / scale for s in stats if s]
        ys = range(len(p50))
        colors = [_COLORS.get(n.split("-")[0], "C0") for n in names]  # OpenVINO, ortstate, the floor
        ax.barh(ys, p50, xerr=[[0] * len(p50), [b - a for a, b in zip(p50, p90)]], capsize=3, color=colors)
        for y, a, b in zip(ys, p50, p90):
            ax.text(b + max(p90) * 0.01, y, _value(a), va="center", fontsize=8)
        ax.set_yticks(list(ys), [_plain(LABELS[n]) for n in names], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, max(p90) * 1.15)
        ax.set_xlabel(f"{unit} per step (bar p50, whisker p90; lower is better)")
        heading = title or f"{result.label or result.workload}: {result.description}"
    else:
        fig, ax = plt.subplots(figsize=(max(7.0, 1.8 * len(results) + 3), 5))
        width = 0.8 / max(1, len(names))
        for j, name in enumerate(names):
            xs, p50, err = [], [], []
            for i, result in enumerate(results):
                stats = result.get(name)
                if stats is not None:
                    xs.append(i + (j - (len(names) - 1) / 2) * width)
                    p50.append(stats.p(50) / scale)
                    err.append((stats.p(90) - stats.p(50)) / scale)
            bars = ax.bar(xs, p50, width, yerr=[[0] * len(err), err], capsize=2, label=_plain(LABELS[name]))
            ax.bar_label(bars, [_value(v) for v in p50], fontsize=6, padding=2, rotation=90)
        ticks = [
            f"{r.label or r.workload}\n{r.description}" + (f"\nweights {r.precision}" * bool(r.precision))
            for r in results
        ]
        ax.set_xticks(range(len(results)), ticks, fontsize=7, rotation=15 if len(results) > 3 else 0)
        ax.set_ylabel(f"{unit} per step (p50, whisker p90)")
        p50s = [s.p(50) for r in results for s in r.runners if not s.skipped]
        if p50s and max(p50s) > 30 * min(p50s):  # workloads orders of magnitude apart: each readable
            ax.set_yscale("log")
            ax.set_ylim(top=ax.get_ylim()[1] * 3)
        else:
            ax.set_ylim(0, ax.get_ylim()[1] * 1.15)  # room for the value labels
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
        heading = title or "per-step latency"
    ax.set_title(f"{heading}\n{_subtitle(results)}", fontsize=9)
    ax.grid(axis="x" if len(results) == 1 else "y", alpha=0.3)
    return fig

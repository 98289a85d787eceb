"""What the real-size benchmark's results say: the issue's targets (PASS/MISS), markdown tables, a plot.

Pure functions of the results document ``realsize.py`` writes (suite ``real-size``): its ``data``
holds ``model``, ``config``, ``engines`` and one entry per precision under ``"precisions"``, each
with ``ir_bin_mib``, ``conversions`` (per ortstate engine: ``onnx_mib``, ``seconds``,
``peak_rss_mib``), ``load`` and ``speed`` (per engine).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks.common import conditions, plot_caption
from benchmarks.report import target, targets_table

__all__ = ["TARGETS", "issue_table", "markdown", "memory_table", "plot", "speed_table", "targets", "targets_table"]

EXACT, DEFAULT = "openvino-exact", "openvino-default"
# the issue's targets on the real-size model (issue 12, "Memory" and "Speed")
TARGETS = {
    "onnx_over_bin": 1.15,
    "convert_rss_over_bin": 1.5,
    "convert_rss_extra_mib": 300.0,
    "load_rss_over_openvino": 1.5,
    "decode_over_openvino": 1.0,
    "prefill_over_openvino": 1.0,
    "int4_convert_s": 10.0,
    "logits_diff": 1e-3,
}


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}×"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def _get(entry: dict[str, Any], part: str, engine: str, key: str) -> float | None:
    value = entry.get(part, {}).get(engine, {}).get(key)
    return value if isinstance(value, (int, float)) else None


def ortstate_engines(entry: dict[str, Any]) -> list[str]:
    """The ortstate engines of one precision's entry, in run order."""
    return [e["name"] for e in entry.get("engines", []) if e["kind"] == "ortstate"]


def _conversion_targets(tag: str, precision: str, conv: dict[str, Any], bin_mib: float) -> list[dict[str, Any]]:
    out = []
    onnx = _ratio(conv.get("onnx_mib"), bin_mib)
    limit = TARGETS["onnx_over_bin"]
    out.append(
        target(
            f"{tag}: ONNX file ≤ {limit}× IR .bin",
            onnx,
            None if onnx is None else onnx <= limit,
            f"{_num(conv.get('onnx_mib'))} MiB / {bin_mib:,.0f} MiB = {_x(onnx)}",
        )
    )
    cap = TARGETS["convert_rss_over_bin"] * bin_mib + TARGETS["convert_rss_extra_mib"]
    rss = conv.get("peak_rss_mib")
    out.append(
        target(
            f"{tag}: convert peak RSS ≤ 1.5× .bin + 300 MiB ({cap:,.0f} MiB)",
            rss,
            None if rss is None else rss <= cap,
            f"{_num(rss)} MiB",
        )
    )
    if precision == "int4":
        s = conv.get("seconds")
        limit = TARGETS["int4_convert_s"]
        out.append(
            target(f"{tag}: convert ≤ {limit:.0f} s", s, None if s is None else s <= limit, f"{_num(s, '.1f')} s")
        )
    return out


def targets(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets for one precision, for every ortstate engine measured."""
    p, out = entry["precision"], []
    bin_mib = entry["ir_bin_mib"]
    for name in ortstate_engines(entry):
        conv = entry.get("conversions", {}).get(name, {})
        tag = f"{p}, {name}"
        if "shared_with" not in conv:
            out += _conversion_targets(tag, p, conv, bin_mib)
        mine, theirs = _get(entry, "load", name, "peak_rss_mib"), _get(entry, "load", EXACT, "peak_rss_mib")
        r = _ratio(mine, theirs)
        limit = TARGETS["load_rss_over_openvino"]
        out.append(
            target(
                f"{tag}: load + decode peak RSS ≤ {limit}× OpenVINO's",
                r,
                None if r is None else r <= limit,
                f"{_num(mine)} MiB vs {_num(theirs)} MiB = {_x(r)}",
            )
        )
        for what, key in (("decode p50", "decode_p50_ms"), ("prefill", "prefill_ms")):
            mine, theirs = _get(entry, "speed", name, key), _get(entry, "speed", EXACT, key)
            r = _ratio(mine, theirs)
            out.append(
                target(
                    f"{tag}: {what} ≤ OpenVINO exact",
                    r,
                    None if r is None else r <= 1.0,
                    f"{_num(mine, '.1f')} ms vs {_num(theirs, '.1f')} ms = {_x(r)}",
                )
            )
        speed = entry.get("speed", {}).get(name, {})
        match, diff = speed.get("tokens_match"), speed.get("max_abs_logits_diff")
        ok = None if match is None else bool(match) and diff is not None and diff <= TARGETS["logits_diff"]
        detail = (
            "n/a"
            if match is None
            else f"tokens {'equal' if match else 'differ at step ' + str(speed.get('first_mismatch'))}"
        )
        if diff is not None:
            detail += f", max abs Δlogits {diff:.1e}"
        out.append(target(f"{tag}: greedy tokens = OpenVINO exact's, logits within 1e-3", diff, ok, detail))
    return out


def issue_table(entries: list[dict[str, Any]], engine: str = "ortstate") -> str:
    """The issue's table, re-measured: one row per precision for ``engine``."""
    lines = [
        "| weights | IR .bin | ortstate ONNX | ortstate peak RSS: convert / load + run "
        "| OpenVINO peak RSS (exact / default) | prefill: ortstate / OpenVINO | decode ms/token: OpenVINO → ortstate |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for e in entries:
        conv = e.get("conversions", {}).get(engine, {})
        ov_rss = " / ".join(_gib(_get(e, "load", n, "peak_rss_mib")) for n in (EXACT, DEFAULT))
        pre = _ratio(_get(e, "speed", engine, "prefill_ms"), _get(e, "speed", EXACT, "prefill_ms"))
        ov, mine = _get(e, "speed", EXACT, "decode_p50_ms"), _get(e, "speed", engine, "decode_p50_ms")
        lines.append(
            f"| {e['precision']} | {e['ir_bin_mib']:,.0f} MiB | {_num(conv.get('onnx_mib'))} MiB "
            f"| {_gib(conv.get('peak_rss_mib'))} / {_gib(_get(e, 'load', engine, 'peak_rss_mib'))} | {ov_rss} "
            f"| {_x(pre)} | {_num(ov, '.1f')} → {_num(mine, '.1f')} ({_x(_ratio(mine, ov))}) |"
        )
    return "\n".join(lines)


def _gib(mb: float | None) -> str:
    return "n/a" if mb is None else f"{mb / 1024:.2f} GiB"


def _per_engine(entries: list[dict[str, Any]], header: list[str], cells: Any) -> str:
    """A markdown table with one row per precision and engine: ``cells(entry, name)`` gives the columns
    after the first two, right-aligned."""
    lines = ["| " + " | ".join(["weights", "engine", *header]) + " |", "| --- | --- |" + " ---: |" * len(header)]
    for e in entries:
        for eng in e.get("engines", []):
            lines.append("| " + " | ".join([e["precision"], eng["name"], *cells(e, eng["name"])]) + " |")
    return "\n".join(lines)


def memory_table(entries: list[dict[str, Any]]) -> str:
    """Per precision and engine: conversion (ortstate) and load + decode (each engine in its own process)."""

    def cells(e: dict[str, Any], name: str) -> list[str]:
        conv = e.get("conversions", {}).get(name, {})
        load = e.get("load", {}).get(name, {})
        peak = _gib(load.get("peak_rss_mib")) if "error" not in load else f"failed: {load['error'].replace('|', '/')}"
        return [
            _num(conv.get("onnx_mib")),
            _num(conv.get("seconds"), ".1f"),
            _gib(conv.get("peak_rss_mib")) if conv else "",
            _num(load.get("load_s"), ".1f"),
            _gib(load.get("loaded_rss_mib")),
            peak,
        ]

    header = ["ONNX MiB", "convert s", "convert peak RSS", "load s", "RSS after load", "peak RSS load + run"]
    return _per_engine(entries, header, cells)


def speed_table(entries: list[dict[str, Any]]) -> str:
    """Per precision and engine: prefill and decode from the shared process, ratios to OpenVINO exact."""

    def cells(e: dict[str, Any], name: str) -> list[str]:
        s = e.get("speed", {}).get(name, {})
        dec = s.get("decode_p50_ms")
        match, diff = s.get("tokens_match"), s.get("max_abs_logits_diff")
        return [
            _num(s.get("prefill_ms"), ".1f"),
            _num(dec, ".1f"),
            _num(s.get("decode_p90_ms"), ".1f"),
            *[_x(_ratio(dec, _get(e, "speed", ov, "decode_p50_ms"))) for ov in (EXACT, DEFAULT)],
            "n/a" if match is None else ("yes" if match else f"no (step {s.get('first_mismatch')})"),
            "n/a" if diff is None else f"{diff:.1e}",
        ]

    header = ["prefill ms", "decode p50 ms/token", "decode p90", "× OV exact (decode)", "× OV default (decode)"]
    return _per_engine(entries, [*header, "tokens = OV exact", "max abs Δlogits"], cells)


def markdown(doc: dict[str, Any], image: str | None = None) -> str:
    """The whole report: conditions, the issue's table, targets, the detail tables, the plot."""
    data = doc["data"]
    entries, c = data["precisions"], data["config"]
    errors = [f"- {e['precision']}: {msg}" for e in entries for msg in e.get("errors", [])]
    parts = [
        conditions(doc),
        f"{data['model']}, prompt {c['prompt']} tokens + {c['steps']} decode steps, batch 1, {c['threads']} threads, "
        f"{c['rounds']} alternating rounds (medians). Load average (1 min) per precision, start → end: "
        + ", ".join(f"{e['precision']} {e['loadavg'][0]} → {e['loadavg'][1]}" for e in entries if "loadavg" in e)
        + ".",
        "### The issue's table, re-measured\n\n" + issue_table(entries),
        "### Targets\n\n" + targets_table([t for e in entries for t in targets(e)]),
        "### Sizes, conversion and memory (each load in its own process: load, prefill, decode steps)\n\n"
        + memory_table(entries),
        "### Speed (all engines in one process, alternating rounds)\n\n" + speed_table(entries),
        "Engines:\n\n" + "\n".join(f"- `{e['name']}`: {e['label']}" for e in data["engines"]),
    ]
    if errors:
        parts.append("### Errors\n\n" + "\n".join(errors))
    if image:
        parts.append(f"![real-size benchmark]({image})")
    return "\n\n".join(parts)


def _converts(entries: list[dict[str, Any]], engine: str) -> bool:
    """True for an ortstate engine with a conversion of its own (not one shared with another engine)."""
    return any(engine in e.get("conversions", {}) and "shared_with" not in e["conversions"][engine] for e in entries)


def plot(doc: dict[str, Any], path: Path) -> None:
    """Four panels over the precisions: decode ms/token, prefill ms, peak RSS, file sizes. Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = doc["data"]
    entries = data["precisions"]
    names = [e["name"] for e in data["engines"]]
    precisions = [e["precision"] for e in entries]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))

    def bars(ax: Any, series: dict[str, list[float | None]], ylabel: str, title: str, fmt: str) -> None:
        width = 0.8 / max(1, len(series))
        for j, (label, values) in enumerate(series.items()):
            xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(values))]
            heights = [v if v is not None else 0.0 for v in values]
            rects = ax.bar(xs, heights, width, label=label)
            ax.bar_label(rects, labels=["" if v is None else format(v, fmt) for v in values], fontsize=7, padding=1)
        ax.set_xticks(range(len(precisions)), precisions)
        ax.set_xlabel("weights (optimum-intel --weight-format)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.margins(y=0.3)
        ax.legend(fontsize=7, loc="upper left", ncols=2)

    def col(part: str, engine: str, key: str, scale: float = 1.0) -> list[float | None]:
        return [None if (v := _get(e, part, engine, key)) is None else v * scale for e in entries]

    bars(axes[0, 0], {n: col("speed", n, "decode_p50_ms") for n in names}, "ms per token (p50)", "decode", ".1f")
    bars(
        axes[0, 1],
        {n: col("speed", n, "prefill_ms") for n in names},
        "ms (median)",
        f"prefill, {data['config']['prompt']} tokens",
        ".0f",
    )
    rss: dict[str, list[float | None]] = {}
    for n in names:
        if _converts(entries, n):
            rss[f"{n}: convert"] = [
                None if (v := e.get("conversions", {}).get(n, {}).get("peak_rss_mib")) is None else v / 1024
                for e in entries
            ]
        rss[f"{n}: load + run"] = col("load", n, "peak_rss_mib", 1 / 1024)
    bars(axes[1, 0], rss, "GiB (peak RSS of the process)", "peak memory", ".2f")
    sizes: dict[str, list[float | None]] = {"IR .bin": [e["ir_bin_mib"] for e in entries]}
    for n in names:
        if _converts(entries, n):
            sizes[f"{n} ONNX + data"] = [e.get("conversions", {}).get(n, {}).get("onnx_mib") for e in entries]
    bars(axes[1, 1], sizes, "MiB", "model files", ",.0f")
    c = data["config"]
    fig.suptitle(
        f"{data['model']}: prompt {c['prompt']} + {c['steps']} decode steps, batch 1, {c['threads']} threads\n"
        + plot_caption(doc),
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

"""What the long-context run of the real-size benchmark says (issue 19): targets, tables, a plot.

Pure functions of the results document ``realsize.py --contexts`` writes (suite ``real-size-context``):
its ``data`` holds ``model``, ``config``, ``engines``, ``skipped`` and one entry per model variant and
precision under ``"precisions"``, each with ``contexts`` (per engine, per
context length as a string: ``prefill_ms``, ``decode_p50_ms``, ``timed_positions``, ``tokens_match``,
``max_abs_logits_diff``, ...), ``load`` (per engine: a process of its own prefilling the longest context:
``peak_rss_mib``, ...), ``conversions`` and ``loadavg_1_5_15`` (start, end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common import conditions, plot_caption
from benchmarks.report import target, targets_table

__all__ = ["TARGETS", "context_table", "growth", "markdown", "memory_table", "plot", "targets"]

REFERENCE = "openvino-exact"
# issue 19's targets
TARGETS = {
    "decode_over_openvino": 1.05,  # at every context
    "growth_over_openvino": 1.2,  # decode(longest) / decode(shortest), against OpenVINO's own
    "prefill_over_openvino": 1.0,  # for the contexts from prefill_from on
    "prefill_from": 2048,
    "rss_over_openvino": 1.5,  # at the longest context
}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}×"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def lengths(entry: dict[str, Any]) -> list[int]:
    """The context lengths measured in one entry, shortest first."""
    runs = [r for r in entry.get("contexts", {}).values() if isinstance(r, dict)]
    return sorted({int(c) for r in runs for c in r})


def _at(entry: dict[str, Any], engine: str, length: int, key: str) -> Any:
    return entry.get("contexts", {}).get(engine, {}).get(str(length), {}).get(key)


def growth(entry: dict[str, Any], engine: str) -> float | None:
    """decode p50 at the longest context over decode p50 at the shortest."""
    ls = lengths(entry)
    return (
        _ratio(_at(entry, engine, ls[-1], "decode_p50_ms"), _at(entry, engine, ls[0], "decode_p50_ms")) if ls else None
    )


def _ortstate_engines(entry: dict[str, Any]) -> list[str]:
    return [e["name"] for e in entry.get("engines", []) if e["kind"] == "ortstate"]


def _name(entry: dict[str, Any]) -> str:
    """How tables and targets name one entry: precision, model, KV heads."""
    kv = f", {entry['kv_heads']} KV heads" if entry.get("kv_heads") else ""
    return f"{entry['precision']} {entry.get('model', '')}{kv}".strip()


def targets(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 19's targets for one entry, for every ortstate engine measured."""
    out, ls = [], lengths(entry)
    for name in _ortstate_engines(entry):
        tag = f"{_name(entry)}, {name}"
        limit = TARGETS["decode_over_openvino"]
        for c in ls:
            mine, ov = _at(entry, name, c, "decode_p50_ms"), _at(entry, REFERENCE, c, "decode_p50_ms")
            r = _ratio(mine, ov)
            ok = None if r is None else r <= limit
            out.append(target(f"{tag}: decode p50 at {c} ≤ {limit}× OpenVINO exact", r, ok, _vs(mine, ov, r)))
        if len(ls) > 1:
            mine, ov = growth(entry, name), growth(entry, REFERENCE)
            r, limit = _ratio(mine, ov), TARGETS["growth_over_openvino"]
            detail = f"{_x(mine)} vs OpenVINO's {_x(ov)} = {_x(r)}"
            out.append(
                target(f"{tag}: decode({ls[-1]})/decode({ls[0]}) ≤ {limit}× OpenVINO's", r, _le(r, limit), detail)
            )
        for c in (c for c in ls if c >= TARGETS["prefill_from"]):
            mine, ov = _at(entry, name, c, "prefill_ms"), _at(entry, REFERENCE, c, "prefill_ms")
            r = _ratio(mine, ov)
            out.append(target(f"{tag}: prefill of {c} ≤ OpenVINO exact", r, _le(r, 1.0), _vs(mine, ov, r)))
        out.append(_tokens_target(entry, name, tag, ls))
        mine = entry.get("load", {}).get(name, {}).get("peak_rss_mib")
        ov = entry.get("load", {}).get(REFERENCE, {}).get("peak_rss_mib")
        r, limit = _ratio(mine, ov), TARGETS["rss_over_openvino"]
        detail = "n/a" if r is None else f"{mine:,.0f} MiB vs {ov:,.0f} MiB = {_x(r)}"
        longest = ls[-1] if ls else "?"
        out.append(target(f"{tag}: peak RSS at {longest} ≤ {limit}× OpenVINO's", r, _le(r, limit), detail))
    return out


def _le(r: float | None, limit: float) -> bool | None:
    return None if r is None else r <= limit


def _vs(mine: float | None, ov: float | None, r: float | None) -> str:
    return f"{_ms(mine)} ms vs {_ms(ov)} ms = {_x(r)}"


def _tokens_target(entry: dict[str, Any], name: str, tag: str, ls: list[int]) -> dict[str, Any]:
    matches = [_at(entry, name, c, "tokens_match") for c in ls]
    diffs = [d for c in ls if (d := _at(entry, name, c, "max_abs_logits_diff")) is not None]
    if not ls or any(m is None for m in matches):
        return target(f"{tag}: greedy tokens = OpenVINO exact's at every context", None, None, "n/a")
    differ = [f"{c} (step {_at(entry, name, c, 'first_mismatch')})" for c, m in zip(ls, matches) if not m]
    detail = f"differ at {', '.join(differ)}" if differ else "equal at every context"
    if diffs:
        detail += f"; max abs Δlogits {max(diffs):.1e}"
    return target(f"{tag}: greedy tokens = OpenVINO exact's at every context", None, not differ, detail)


def context_table(entry: dict[str, Any], engine: str) -> str:
    """One row per context length: decode and its growth, prefill, tokens, for ``engine`` against OpenVINO exact."""
    lines = [
        "| context | timed positions | decode ms/token: OpenVINO → ortstate | × OV | growth vs shortest: "
        "OpenVINO / ortstate | prefill ms: OpenVINO → ortstate | × OV | tokens = OV | max abs Δlogits |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    ls = lengths(entry)
    for c in ls:
        ov, mine = _at(entry, REFERENCE, c, "decode_p50_ms"), _at(entry, engine, c, "decode_p50_ms")
        g_ov = _ratio(ov, _at(entry, REFERENCE, ls[0], "decode_p50_ms"))
        g_mine = _ratio(mine, _at(entry, engine, ls[0], "decode_p50_ms"))
        pre_ov, pre = _at(entry, REFERENCE, c, "prefill_ms"), _at(entry, engine, c, "prefill_ms")
        pos = _at(entry, engine, c, "timed_positions")
        match, diff = _at(entry, engine, c, "tokens_match"), _at(entry, engine, c, "max_abs_logits_diff")
        cells = [
            str(c),
            "n/a" if not pos else f"{pos[0]}–{pos[1]}",
            f"{_ms(ov)} → {_ms(mine)}",
            _x(_ratio(mine, ov)),
            f"{_x(g_ov)} / {_x(g_mine)}",
            f"{_ms(pre_ov)} → {_ms(pre)}",
            _x(_ratio(pre, pre_ov)),
            "n/a" if match is None else ("yes" if match else f"no (step {_at(entry, engine, c, 'first_mismatch')})"),
            "n/a" if diff is None else f"{diff:.1e}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_table(entries: list[dict[str, Any]]) -> str:
    """Per entry and engine: conversion (ortstate), and a process of its own loading the model, prefilling the
    longest context and decoding a few steps."""
    lines = [
        "| model | engine | ONNX MiB | convert s | convert peak RSS MiB | load s | RSS after load MiB "
        "| prefill ms | peak RSS MiB | × OV |",
        "| --- | --- |" + " ---: |" * 8,
    ]
    for e in entries:
        ov = e.get("load", {}).get(REFERENCE, {}).get("peak_rss_mib")
        for eng in e.get("engines", []):
            conv, load = e.get("conversions", {}).get(eng["name"], {}), e.get("load", {}).get(eng["name"], {})
            cells = [conv.get("onnx_mib"), conv.get("seconds"), conv.get("peak_rss_mib"), load.get("load_s")]
            cells += [load.get("loaded_rss_mib"), load.get("prefill_ms"), load.get("peak_rss_mib")]
            text = ["" if v is None else (f"{v:.1f}" if i in (1, 3) else f"{v:,.0f}") for i, v in enumerate(cells)]
            if "error" in load:
                text[-1] = f"failed: {load['error'].replace('|', '/')}"
            text.append(_x(_ratio(load.get("peak_rss_mib"), ov)))
            lines.append(f"| {_name(e)} | {eng['name']} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def _load_text(e: dict[str, Any]) -> str:
    load = e.get("loadavg_1_5_15")
    if not load:
        return "n/a"
    return " → ".join("/".join(f"{x:.2f}" for x in one) for one in load)


def markdown(doc: dict[str, Any], image: str | None = None) -> str:
    """The whole report: conditions, per-entry context tables, targets, memory, engines, the plot."""
    data = doc["data"]
    entries, c = data["precisions"], data["config"]
    parts = [
        conditions(doc),
        f"{data['model']}; batch 1, {c['threads']} threads, "
        f"greedy. Per context length every engine, in one process, prefills that many tokens (timed, "
        f"{c.get('prefill_rounds', 1)}× alternating, median), "
        f"decodes {c['warmup']} checked untimed steps, then {c['rounds']} rounds of {c['steps']} decode steps "
        f"alternate between the engines, each continuing its own cache (so the timed positions drift by the "
        f"steps taken: the table gives them); decode = p50 over all timed steps. Peak RSS: each engine in a "
        f"process of its own, loading, prefilling the longest context and decoding {c['rss_steps']} steps.",
        "Load average (1/5/15 min) per run, start → end: "
        + "; ".join(f"{_name(e)} {_load_text(e)}" for e in entries)
        + ". A timing counts only from a quiet machine (load well below the 2 cores): read ratios of one run.",
    ]
    for e in entries:
        for name in _ortstate_engines(e):
            parts.append(f"### {_name(e)}: {name} against OpenVINO exact\n\n" + context_table(e, name))
    parts.append("### Targets (issue 19)\n\n" + targets_table([t for e in entries for t in targets(e)]))
    shared = [
        f"{_name(e)} {peak / 1024:.1f} GiB"
        for e in entries
        if (peak := e.get("contexts_process", {}).get("peak_rss_mib")) is not None
    ]
    note = (
        "\n\nThe timing process, every engine holding its cache of each length in turn, peaked at "
        + "; ".join(shared)
        + "."
        if shared
        else ""
    )
    parts.append("### Memory at the longest context, and conversion\n\n" + memory_table(entries) + note)
    parts.append("Engines:\n\n" + "\n".join(f"- `{e['name']}`: {e['label']}" for e in data["engines"]))
    errors = [f"- {_name(e)}: {msg}" for e in entries for msg in e.get("errors", [])]
    errors += [f"- {what}: skipped: {why}" for what, why in data.get("skipped", {}).items()]
    if errors:
        parts.append("### Errors\n\n" + "\n".join(errors))
    if image:
        parts.append(f"![decode ms/token against context length]({image})")
    return "\n\n".join(parts)


def plot(doc: dict[str, Any], path: Path) -> None:
    """A column per entry (model and precision): decode ms/token (top) and prefill ms (bottom) against the
    context length, a line per engine. Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = doc["data"]
    entries = data["precisions"]
    fig, axes = plt.subplots(2, len(entries), figsize=(5.5 * len(entries) + 1, 8), squeeze=False)
    for col, e in enumerate(entries):
        ls = lengths(e)
        panels = (("decode_p50_ms", "decode ms/token (p50)", 1.0), ("prefill_ms", "prefill s (median)", 1e-3))
        for row, (key, ylabel, scale) in enumerate(panels):
            ax = axes[row, col]
            for eng in e.get("engines", []):
                ys = [None if (v := _at(e, eng["name"], c, key)) is None else v * scale for c in ls]
                pts = [(c, y) for c, y in zip(ls, ys) if y is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=eng["name"])
                    for c, y in pts:
                        ax.annotate(
                            f"{y:,.0f}" if y >= 100 else f"{y:.1f}" if y >= 1 else f"{y:.2f}",
                            (c, y),
                            fontsize=7,
                            xytext=(3, 3),
                            textcoords="offset points",
                        )
            ax.set_xlabel("context length (tokens prefilled)")
            ax.set_ylabel(ylabel)
            ax.set_xticks(ls)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="upper left")
            if row == 0:
                ax.set_title(
                    f"{_name(e)}\nload average (1 min) {' → '.join(map(str, e.get('loadavg', [])))}", fontsize=9
                )
    fig.suptitle(
        f"decode and prefill against context, batch 1, {data['config']['threads']} threads\n{plot_caption(doc)}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

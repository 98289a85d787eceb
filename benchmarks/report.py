"""The suite's outputs: targets with PASS/MISS, markdown tables, plots, the README's results section."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from benchmarks import concurrency
from ortstate.timing import LABELS, BenchResult, markdown_table, plot_results

COLUMNS = ["openvino", "openvino-shared", "custom-op", "auto", "explicit", "floor", "torch"]
SHORT = {"openvino": "OpenVINO", "openvino-shared": "OV shared", "custom-op": "custom-op", "explicit": "explicit"}
SHORT |= {"auto": "auto"}
SHORT |= {"floor": "floor", "torch": "PyTorch"}
RATIO_RUNNERS = ("custom-op", "auto", "explicit")
CONCURRENCY_LABELS = {"bare": "bare ORT (control)", "bare-processes": "bare ORT in processes (control, no GIL)"}


def ratio_text(value: float | None) -> str:
    """``1.23×``, or ``n/a``."""
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}×"


_x = ratio_text


def target(name: str, value: float | None, ok: bool | None, detail: str) -> dict[str, Any]:
    status = "n/a" if ok is None else ("PASS" if ok else "MISS")
    return {"target": name, "value": value, "status": status, "detail": detail}


def _worst(points: list[dict[str, Any]], runner: str, lo: int, hi: int) -> tuple[float | None, str]:
    ratios = [(p["result"].ratio(runner, "floor"), p["value"]) for p in points if lo <= p["value"] <= hi]
    ratios = [(r, v) for r, v in ratios if r is not None]
    if not ratios:
        return None, "did not run"
    r, v = max(ratios)
    return r, "; ".join(f"{p}: {_x(x)}" for x, p in ratios) + f" (worst at {v})"


# How a target line names a runner: the "custom-op form" is a custom-op model run by
# StatefulSession, by default (auto: rewritten into the explicit form on load) and with its Python
# state ops forced.
RUNNER_TARGET = {
    "auto": 'custom-op model, default `form="auto"`',
    "custom-op": 'custom-op form, Python state ops (`form="custom-op"`)',
    "explicit": "explicit",
}


def targets(demo: BenchResult, llm: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The targets of the benchmark issue, from this run's ratios (batch 1, 1 thread)."""
    out = []
    for runner, limit in (("auto", 1.25), ("custom-op", 1.25), ("explicit", 1.05)):
        r = demo.ratio(runner, "floor")
        name = f"demo LSTM: {RUNNER_TARGET[runner]} ≤ {limit}× floor"
        out.append(target(name, r, None if r is None else r <= limit, _x(r)))
    vs = {n: demo.ratio(n, "openvino") for n in ("custom-op", "auto", "explicit")}
    shared = {n: demo.ratio(n, "openvino-shared") for n in vs}
    ok = None if None in vs.values() else all(v < 1 for v in vs.values())  # type: ignore[operator]
    detail = ", ".join(f"{n} {_x(v)} of `infer(feeds)`, {_x(shared[n])} of `share_inputs=True`" for n, v in vs.items())
    out.append(target("demo LSTM: both forms faster than OpenVINO", max(vs.values(), default=None), ok, detail))
    runs_llama = llm["llama"] and all(
        p["result"].get("custom-op") and p["result"].get("explicit") for p in llm["llama"]
    )
    models = [(llm["llama"], "llama")] if runs_llama else []
    for points, model in models + [(llm["standin"], "KV-cache stand-in")]:
        for runner, limit in (("auto", 1.5), ("custom-op", 1.5), ("explicit", 1.1)):
            r, detail = _worst(points, runner, 16, 256)
            name = f"LLM decode, positions 16–256 ({model}): {RUNNER_TARGET[runner]} ≤ {limit}× floor"
            out.append(target(name, r, None if r is None else r <= limit, detail))
    out.append(state_movement(llm["standin"]))
    for model in dict.fromkeys(r["model"] for r in rows):
        control = concurrency.speedup(rows, "bare", 16, model)
        processes = concurrency.speedup(rows, "bare-processes", 16, model)
        for form in ("custom-op", "explicit"):
            s = concurrency.speedup(rows, form, 16, model)
            name = f"16 concurrent requests, {model} ({form}): 2 threads ≥ 1.5× 1 thread"
            detail = f"{_x(s)} (controls: bare ORT, 2 threads {_x(control)}; bare ORT, 2 processes {_x(processes)})"
            out.append(target(name, s, None if s is None else s >= 1.5, detail))
    return out


def state_movement(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Custom-op form, Python state ops: bytes of state moved through them (read and written, ~2x
    what the variables hold) per second of time over the floor, at each stand-in position; the
    target is judged at the largest state (small ones measure the PyOps' fixed per-call cost)."""
    rates = []
    for p in points:
        custom, floor = p["result"].get("custom-op"), p["result"].get("floor")
        if custom is None or floor is None or "state_bytes" not in p:
            continue
        over = (custom.p(50) - floor.p(50)) * 1e-6
        rates.append((p["value"], p["state_bytes"], 2 * p["state_bytes"] / over / 1e9 if over > 0 else math.inf))
    name = "LLM decode (KV-cache stand-in): custom-op form moves state ≥ 1 GB/s of overhead"
    if not rates:
        return target(name, None, None, "did not run")
    position, size, rate = max(rates, key=lambda r: r[1])
    detail = "; ".join(f"{p}: {_gbs(r)} ({s / 1024:.0f} KiB)" for p, s, r in rates) + f" (judged at {position})"
    return target(name, rate, rate >= 1.0, detail)


def _gbs(rate: float) -> str:
    return "overhead within noise" if math.isinf(rate) else f"{rate:.1f} GB/s"


def targets_table(items: list[dict[str, Any]]) -> str:
    lines = ["| target | result | this run |", "| --- | --- | --- |"]
    lines += [f"| {t['target']} | **{t['status']}** | {t['detail']} |" for t in items]
    return "\n".join(lines)


def sweep_table(points: list[dict[str, Any]], label: str) -> str:
    """One row per sweep point: p50 µs of each runner, then custom-op/explicit vs floor and vs OpenVINO."""
    present = [c for c in COLUMNS if any(p["result"].get(c) for p in points)]
    head = [label] + [f"{SHORT[c]} µs" for c in present]
    head += [f"{n} ×{b}" for b in ("floor", "OV") for n in RATIO_RUNNERS]
    lines = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for p in points:
        r: BenchResult = p["result"]
        cells = [str(p["value"])]
        cells += [f"{s.p(50):.1f}" if (s := r.get(c)) else "—" for c in present]
        cells += [_x(r.ratio(n, b)) for b in ("floor", "openvino") for n in RATIO_RUNNERS]
        lines.append("| " + " | ".join(cells) + " |")
    skipped = {s.name: s.skipped for p in points for s in p["result"].runners if s.skipped}
    notes = [f"\n{LABELS.get(n, n)} skipped: {why}" for n, why in skipped.items()]
    return "\n".join(lines) + "".join(notes)


def concurrency_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | form | requests | steps/s, 1 thread (process) | steps/s, 2 threads (processes) | 2 / 1 |"]
    lines.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for model in dict.fromkeys(r["model"] for r in rows):
        for form in concurrency.FORMS:
            for n in sorted({r["requests"] for r in rows}):
                by = {r["threads"]: r for r in rows if (r["model"], r["form"], r["requests"]) == (model, form, n)}
                if 1 in by and 2 in by:
                    s = concurrency.speedup(rows, form, n, model)
                    label = CONCURRENCY_LABELS.get(form, form)
                    rates = f"{by[1]['steps_per_s']:.0f} | {by[2]['steps_per_s']:.0f}"
                    lines.append(f"| {model} | {label} | {n} | {rates} | {_x(s)} |")
    return "\n".join(lines)


def memory_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | form | requests | position | RSS KiB / request | variables KiB / request |"]
    lines.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        position = "—" if r["position"] is None else r["position"]
        cells = [r["model"], r["form"], r["requests"], position, r["rss_per_request_kib"], r["state_kib"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def profile_text(prof: dict[str, Any]) -> str:
    """The profile section: the subtraction table, ORT's node shares, cProfile, and a reading."""
    layers = prof["layers"]
    us = layers["us"]
    lines = ["| what runs per step (demo LSTM, 1 thread) | p50 µs |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.1f} |" for k, v in us.items()]
    nodes = [n for n in prof["ort_nodes"] if not n[0].startswith("(")]
    total = sum(n[1] for n in nodes) or 1.0
    node_lines = [f"{'node type':<22} {'share of kernel time':>20} {'nodes':>6}"]
    node_lines += [f"{name:<22} {100 * t / total:19.1f}% {calls:6.0f}" for name, t, calls in nodes[:12]]
    floor, custom = us["floor (IOBinding)"], us["StatefulSession.run, custom-op"]
    state_ops = [n for n in nodes if n[0].startswith(("ReadValue", "ReadStates", "Assign"))]
    fused = ", ".join(f"{name} ×{calls:.0f}" for name, _, calls in state_ops) or "none seen"
    shares = prof["cprofile"]["shares"]
    split = {k: shares[k] * custom for k in shares}
    reading = (
        f"Reading: ONNX Runtime itself (the floor) takes {floor:.1f} µs per step. The explicit form adds "
        f"{layers['explicit_over_floor_us']:+.1f} µs over it (noise-level when near 0). The custom-op form adds "
        f"{layers['custom_over_floor_us']:.1f} µs. A PyOp call costs {layers['per_pyop_us']:.1f} µs "
        f"(the {layers['pyops_per_step']} fused ReadValue/Assign PyOps of the graph a custom-op session runs, "
        f"run bare with a request store of their own, against the explicit graph run the same way); the "
        f"session's state PyOps per step: {fused}. cProfile's shares of one custom-op step (it inflates "
        f"Python-heavy code: the "
        f"profiled step took {prof['cprofile']['profiled_us']:.0f} µs against {custom:.1f} µs unprofiled), "
        f"applied to the unprofiled {custom:.1f} µs, a rough split: ORT's C++ run without the PyOps ≈ "
        f"{split['ort_cpp']:.1f} µs, the PyOps (onnxruntime-extensions hook and ortstate's op bodies) ≈ "
        f"{split['pyops']:.1f} µs, ortstate's Python in `run()` and ORT's Python wrapper ≈ "
        f"{split['python']:.1f} µs."
    )
    return (
        "\n".join(lines)
        + f"\n\n{reading}\n\nORT profiler (`enable_profiling`), custom-op session, kernel time by node type "
        + "(the profiler itself inflates every node; shares only):\n\n```\n"
        + "\n".join(node_lines)
        + "\n```\n\ncProfile of `StatefulSession.run`, custom-op form, per step:\n\n```\n"
        + prof["cprofile"]["text"]
        + "\n```"
    )


def _lines(ax: Any, points: list[dict[str, Any]], xlabel: str, log: bool) -> None:
    for name in COLUMNS:
        xs = [p["value"] for p in points if p["result"].get(name)]
        ys = [p["result"].get(name).p(50) for p in points if p["result"].get(name)]
        if xs:
            ax.plot(xs, ys, marker="o", label=SHORT[name])
    if log:
        ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("µs per step (p50)")
    ax.grid(alpha=0.3)


def plots(out: Path, demo: BenchResult, sweeps: dict[str, Any], llm: dict[str, Any], rows: list[Any]) -> list[str]:
    """demo.png, sweeps.png, llm.png, concurrency.png in ``out``; returns their names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_results([demo], out / "demo.png", "demo char LSTM: per-step latency (1 thread)")
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (key, label) in zip(
        axes.flat,
        [
            ("hidden", "LSTM hidden size"),
            ("layers", "LSTM layers"),
            ("batch", "LSTM batch"),
            ("variables", "number of variables"),
        ],
    ):
        _lines(ax, sweeps[key], label, key != "layers")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "sweeps.png", dpi=100)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, title in ((axes[0], "llama", "llama (max_position_embeddings)"), (axes[1], "standin", "KV stand-in")):
        if llm[key]:
            _lines(ax, llm[key], "decode position (KV length)", True)
        ax.set_title(f"decode step vs position: {title}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "llm.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for form in concurrency.FORMS:
        for threads in (1, 2):
            mine = [r for r in rows if r["model"] == "char_lstm" and r["form"] == form and r["threads"] == threads]
            pts = sorted((r["requests"], r["steps_per_s"]) for r in mine)
            ax.plot(*zip(*pts), marker="o", label=f"{form}, {threads} thread(s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent requests on one session (demo LSTM)")
    ax.set_ylabel("aggregate steps/s")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "concurrency.png", dpi=100)
    plt.close(fig)
    return ["demo.png", "sweeps.png", "llm.png", "concurrency.png"]


def rewrite_readme(readme: Path, body: str, section: str = "results") -> bool:
    """Replace what stands between the ``<!-- SECTION:start/end -->`` markers of ``readme`` with ``body``;
    False (and the file untouched) when the markers are not there."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    text = readme.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        return False
    readme.write_text(pattern.sub(lambda _: f"{start}\n{body}\n{end}", text), encoding="utf-8")
    return True


__all__ = [
    "concurrency_table",
    "markdown_table",
    "plots",
    "profile_text",
    "ratio_text",
    "rewrite_readme",
    "sweep_table",
    "target",
    "targets",
    "targets_table",
]

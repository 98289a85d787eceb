"""The suite's recurrent-model sections (issue 22): lstm2's step taken apart, and the converted
graphs against native exports; their targets, PASS/MISS as the other targets (see :mod:`report`)."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.report import RUNNER_TARGET, ratio_text, target
from ortstate.timing import BenchResult, markdown_table

__all__ = ["LSTM2_LIMIT", "NATIVE_LIMIT", "issue22_targets", "lstm2_text", "native_text"]

LSTM2_LIMIT = 1.55  # custom-op form over the floor: the floor plus the state ops' calls, little else
NATIVE_LIMIT = 1.0  # converted explicit graph over a native export, both bare


def issue22_targets(lstm2: dict[str, Any], natives: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 22: the custom-op form's cost on lstm2, and the converted graph against a native export."""
    result: BenchResult = lstm2["result"]
    layers = lstm2["layers"]
    r = result.ratio("custom-op", "floor")
    custom, floor = result.get("custom-op"), result.get("floor")
    detail = ratio_text(r)
    if custom and floor:
        calls, each = layers["pyops_per_step"], layers["per_pyop_us"]
        detail += (
            f" (custom-op {custom.p(50):.1f} µs; floor {floor.p(50):.1f} µs + {calls} state op calls × "
            f"{each:.1f} µs = {floor.p(50) + calls * each:.1f} µs)"
        )
    name = f"lstm2: {RUNNER_TARGET['custom-op']} ≤ {LSTM2_LIMIT}× floor"
    out = [target(name, r, None if r is None else r <= LSTM2_LIMIT, detail)]
    ratios = [row["ratio"] for row in natives]
    mean = float(math.exp(sum(math.log(x) for x in ratios) / len(ratios))) if ratios else None
    agree = all(row["max_abs_diff"] == 0 for row in natives)
    each = "; ".join(f"{row['model']} {ratio_text(row['ratio'])}" for row in natives)
    detail = f"geometric mean {ratio_text(mean)} ({each}); outputs {'identical' if agree else 'DIFFER'}"
    name = f"recurrent models: converted explicit graph ≤ {NATIVE_LIMIT}× a native export (bare ORT)"
    ok = None if mean is None else mean <= NATIVE_LIMIT and agree
    out.append(target(name, mean, ok, detail))
    return out


def lstm2_text(lstm2: dict[str, Any]) -> str:
    result: BenchResult = lstm2["result"]
    us = lstm2["layers"]["us"]
    lines = ["| what runs per step (lstm2, 1 thread, best of the passes) | p50 µs |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.1f} |" for k, v in us.items()]
    layers = lstm2["layers"]
    return (
        f"### lstm2: `models/lstm_2l_dynbatch` (2-layer LSTM, hidden 16; {result.steps} steps × "
        f"{result.rounds} rounds)\n\n{markdown_table(result)}\n\nOne step taken apart (no profiler running; "
        f"`benchmarks/profile_step.py`): {layers['pyops_per_step']} state op calls per step (fused), one costs "
        f"{layers['per_pyop_us']:.1f} µs (the custom-op graph with its own request store against the "
        f"explicit graph, both in a bare `InferenceSession.run`).\n\n" + "\n".join(lines)
    )


def native_text(natives: list[dict[str, Any]]) -> str:
    head = "| model | Transposes native / converted | nodes native / converted | native µs | converted µs "
    head += "| ×native | max abs Δ |"
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in natives:
        t, n, p = row["transposes"], row["nodes"], row["p50_us"]
        lines.append(
            f"| {row['model']} | {t['native']} / {t['converted']} | {n['native']} / {n['converted']} | "
            f"{p['native']:.1f} | {p['converted']:.1f} | {ratio_text(row['ratio'])} | {row['max_abs_diff']:.1e} |"
        )
    first = natives[0] if natives else {"steps": 0, "rounds": 0}
    return (
        "### Converted recurrent models against a native ONNX export (bare ONNX Runtime, 1 thread)\n\n"
        "Each model's explicit-form graph as ortstate converts it, and the graph `torch.onnx.export` "
        "writes for the same network (`benchmarks/native.py`: written with the converted model's weights "
        "and names; op for op what torch 2.13's TorchScript exporter writes), each run as the floor runs "
        f"(two pre-bound IOBindings), {first['steps']} steps × {first['rounds']} alternating rounds; p50 "
        "over every timed step.\n\n" + "\n".join(lines)
    )

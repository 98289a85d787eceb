"""What the LLM-streams benchmark's numbers say: per-run metrics, medians over rounds, token agreement,
issue 29's targets (PASS/MISS), the markdown report and the plot.

Pure functions of what ``llm_streams_child.py`` measures and ``llm_streams.py`` collects (the
``data`` of its results document, see ``benchmarks.common``): ``config``; ``runs``, every measuring
process (engine, streams, round, the load average before and after, its result);
``summary[engine][streams]`` the medians over rounds; ``tokens``, the streams' agreement.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import conditions
from benchmarks.report import ratio_text, target, targets_table
from ortstate.timing.llm_streams import stream_metrics

__all__ = [
    "ENGINES",
    "TARGETS",
    "body",
    "compare_tokens",
    "markdown",
    "plot",
    "stream_metrics",
    "summarize",
    "targets",
    "targets_table",
]

# name -> what the tables call it; the order is the run order of round 1 (round 2 runs it backwards)
ENGINES = {
    "ov-exact": "OpenVINO GenAI CB, exact config",
    "ov-default": "OpenVINO GenAI CB, default config",
    "sequential": "ortstate, one stream at a time",
    "pool": "ortstate ContinuousBatcher",
    "pool-int8": "ortstate ContinuousBatcher, int8 activations",
    "pool-fake": "stand-in batcher (harness check: lone Generators, one at a time)",
}
REFERENCE = "sequential"  # every engine's tokens are compared with ortstate's own lone Generator
# issue 29, "Targets"
TARGETS = {
    "pool_over_ov_exact": 1.0,
    "pool_int8_over_ov_default": 1.0,
    "pool_over_sequential": 3.5,
    "itl_p99_over_ov_exact": 1.5,
    "rss_over_ov_exact": 1.2,
}
METRICS = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "peak_rss_mib", "loaded_rss_mib")


def queue_times(times: list[list[float]], t0: float, streams: int) -> list[list[float]]:
    """The token times of ``streams`` streams served one after another, from a run of the first
    ``len(times)`` of them only (each stream costs the same: same prompt length and new tokens):
    stream ``j`` repeats measured stream ``j % k``, shifted by ``j // k`` times the measured run's wall."""
    k = len(times)
    wall = max(t[-1] for t in times if t) - t0
    return [[x + (j // k) * wall for x in times[j % k]] for j in range(streams)]


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Medians over rounds per engine and stream count: ``{engine: {streams: {metric: median, ...}}}``.

    A cell whose every round failed keeps the first failure as ``error``.
    """
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["engine"], run["streams"]), []).append(run)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (engine, streams), rounds in cells.items():
        ok = [r["result"] for r in rounds if "error" not in r["result"]]
        cell: dict[str, Any] = {"rounds": len(rounds), "ok_rounds": len(ok)}
        if not ok:
            cell["error"] = rounds[0]["result"]["error"]
        for key in METRICS:
            values = [r[key] for r in ok if isinstance(r.get(key), (int, float))]
            cell[key] = float(np.median(values)) if values else None
        notes = sorted({r["note"] for r in ok if r.get("note")})
        if notes:
            cell["note"] = "; ".join(notes)
        out.setdefault(engine, {})[str(streams)] = cell
    return out


def compare_tokens(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per engine and stream count: how many streams gave exactly the reference engine's tokens (in every
    round), of the streams the reference ran (its runs at any stream count: prompt ``i`` is the same
    whatever the count). ``{engine: {streams: {"equal": k, "compared": n, "first_differing": i}}}``."""
    ref: dict[int, list[int]] = {}
    for run in runs:
        if run["engine"] == REFERENCE and "error" not in run["result"]:
            for i, tokens in enumerate(run["result"]["tokens"]):
                ref.setdefault(i, tokens)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        if "error" in run["result"] or not ref:
            continue
        cell = out.setdefault(run["engine"], {}).setdefault(str(run["streams"]), {"differ": set(), "ids": set()})
        for i, tokens in enumerate(run["result"]["tokens"]):
            if i in ref:
                cell["ids"].add(i)
                if tokens != ref[i]:
                    cell["differ"].add(i)
    return {
        engine: {
            n: {
                "equal": len(c["ids"] - c["differ"]),
                "compared": len(c["ids"]),
                "first_differing": min(c["differ"], default=None),
            }
            for n, c in cells.items()
        }
        for engine, cells in out.items()
    }


def _get(data: dict[str, Any], engine: str, streams: int, key: str) -> float | None:
    value = data.get("summary", {}).get(engine, {}).get(str(streams), {}).get(key)
    return value if isinstance(value, (int, float)) and not math.isnan(value) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "n/a" if value is None else format(value, fmt)


def _ratio_target(
    data: dict[str, Any],
    name: str,
    mine: tuple[str, int, str],
    theirs: tuple[str, int, str],
    limit: float,
    at_most: bool,
    unit: str,
    fmt: str = ",.1f",
) -> dict[str, Any]:
    a, b = _get(data, *mine), _get(data, *theirs)
    r = _ratio(a, b)
    ok = None if r is None else (r <= limit if at_most else r >= limit)
    return target(name, r, ok, f"{_num(a, fmt)} vs {_num(b, fmt)} {unit} = {ratio_text(r)}")


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 29's targets on this run; a target whose engines or stream count were not measured is n/a."""
    p, t, out = data["config"]["precision"], TARGETS, []
    for n in (8, 32, 64):
        out.append(
            _ratio_target(
                data,
                f"{p}: pool tokens/s ≥ {t['pool_over_ov_exact']}× OV GenAI exact at {n} streams",
                ("pool", n, "tokens_per_s"),
                ("ov-exact", n, "tokens_per_s"),
                t["pool_over_ov_exact"],
                False,
                "tok/s",
            )
        )
    out.append(
        _ratio_target(
            data,
            f"{p}: pool-int8 tokens/s ≥ {t['pool_int8_over_ov_default']}× OV GenAI default at 32 streams",
            ("pool-int8", 32, "tokens_per_s"),
            ("ov-default", 32, "tokens_per_s"),
            t["pool_int8_over_ov_default"],
            False,
            "tok/s",
        )
    )
    out.append(
        _ratio_target(
            data,
            f"{p}: pool tokens/s ≥ {t['pool_over_sequential']}× one stream at a time at 32 streams",
            ("pool", 32, "tokens_per_s"),
            ("sequential", 32, "tokens_per_s"),
            t["pool_over_sequential"],
            False,
            "tok/s",
        )
    )
    out.append(
        _ratio_target(
            data,
            f"{p}: pool inter-token p99 ≤ {t['itl_p99_over_ov_exact']}× OV GenAI exact's at 32 streams",
            ("pool", 32, "itl_p99_ms"),
            ("ov-exact", 32, "itl_p99_ms"),
            t["itl_p99_over_ov_exact"],
            True,
            "ms",
        )
    )
    out.append(_rss_target(data, p))
    out.append(_tokens_target(data, p))
    return out


def _rss_target(data: dict[str, Any], p: str) -> dict[str, Any]:
    """Peak RSS, the worst ratio over the stream counts both ran."""
    limit = TARGETS["rss_over_ov_exact"]
    worst: tuple[float, int, float, float] | None = None
    for n in data["config"]["streams"]:
        a, b = _get(data, "pool", n, "peak_rss_mib"), _get(data, "ov-exact", n, "peak_rss_mib")
        r = _ratio(a, b)
        if r is not None and (worst is None or r > worst[0]):
            worst = (r, n, a, b)  # type: ignore[assignment]
    budget = "the same KV budget" if data["config"].get("pool_same_kv") else "the pool's default KV budget"
    name = f"{p}: pool peak RSS ≤ {limit}× OV GenAI exact's (worst stream count; {budget})"
    if worst is None:
        return target(name, None, None, "n/a")
    r, n, a, b = worst
    return target(name, r, r <= limit, f"{a:,.0f} vs {b:,.0f} MiB at {n} stream{'s' * (n != 1)} = {ratio_text(r)}")


def _tokens_target(data: dict[str, Any], p: str) -> dict[str, Any]:
    cells = data.get("tokens", {}).get("pool", {})
    equal = sum(c["equal"] for c in cells.values())
    compared = sum(c["compared"] for c in cells.values())
    name = f"{p}: every pool stream's tokens = a lone Generator's (one stream at a time)"
    if not compared:
        return target(name, None, None, "n/a")
    return target(name, equal / compared, equal == compared, f"{equal} of {compared} streams (all stream counts)")


def model_label(config: dict[str, Any]) -> str:
    """The model and its precision (``qwen2-0.5b-random int4``), or the folder's name alone."""
    model, precision = config.get("model", ""), config["precision"]
    return precision if model in ("", precision) else f"{model} {precision}"


def _cell(value: float | None, fmt: str = ",.1f") -> str:
    return "" if value is None else format(value, fmt)


def results_table(data: dict[str, Any]) -> str:
    """One row per stream count and engine: the medians over rounds, tokens against the reference,
    the load average around the runs."""
    head = (
        "| streams | engine | tokens/s | × OV exact | TTFT p50 / p99 ms | ITL p50 / p99 ms | peak RSS MiB "
        "| RSS loaded MiB | tokens = one-at-a-time | load avg before → after |"
    )
    lines = [head, "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    loads: dict[tuple[str, int], list[str]] = {}
    for run in data["runs"]:
        before, after = run["loadavg_before"][0], run["loadavg_after"][0]
        loads.setdefault((run["engine"], run["streams"]), []).append(f"{before:.2f} → {after:.2f}")
    for n in data["config"]["streams"]:
        for engine in data["config"]["engines"]:
            cell = data["summary"].get(engine, {}).get(str(n))
            if cell is None:
                continue
            label = ENGINES.get(engine, engine)
            if "error" in cell:
                lines.append(f"| {n} | {label} | not available: {cell['error']} | | | | | | | |")
                continue
            tok = data.get("tokens", {}).get(engine, {}).get(str(n))
            same = "" if tok is None else f"{tok['equal']}/{tok['compared']}"
            rate = cell["tokens_per_s"]
            vs_ov = ratio_text(_ratio(rate, _get(data, "ov-exact", n, "tokens_per_s")))
            note = f" ({cell['note']})" if cell.get("note") else ""
            lines.append(
                f"| {n} | {label}{note} | {_cell(rate)} | {vs_ov} "
                f"| {_cell(cell['ttft_p50_ms'], ',.0f')} / {_cell(cell['ttft_p99_ms'], ',.0f')} "
                f"| {_cell(cell['itl_p50_ms'])} / {_cell(cell['itl_p99_ms'])} | {_cell(cell['peak_rss_mib'], ',.0f')} "
                f"| {_cell(cell['loaded_rss_mib'], ',.0f')} | {same} | {'; '.join(loads.get((engine, n), []))} |"
            )
    return "\n".join(lines)


def setup_text(data: dict[str, Any]) -> str:
    """What ran: the model, the prompts and new tokens, threads, rounds, the KV budgets."""
    c = data["config"]
    return (
        f"- model: {model_label(c)} (`{c['model_dir']}`), prompts of {c['prompt']} random ids (seed {c['seed']}), "
        f"{c['new']} new greedy tokens per stream, {c['threads']} threads, {c['rounds']} round(s), "
        f"OV GenAI KV cache {_gib(c['kv_cache_gb'])}; pool KV budget: "
        + ("the same" if c.get("pool_same_kv") else "its default")
    )


def _gib(value: int | dict[str, int]) -> str:
    """OV GenAI's cache_size: one for every stream count, or per count."""
    if isinstance(value, int):
        return f"{value} GiB"
    return (
        ", ".join(f"{v} GiB at {n}" for n, v in value.items())
        if len(set(value.values())) > 1
        else (f"{next(iter(value.values()))} GiB" if value else "n/a")
    )


def body(doc: dict[str, Any], image: str | None) -> str:
    """The report without its title: conditions, setup, targets, the table, the plot (``image``)."""
    data = doc["data"]
    parts = [
        conditions(doc),
        setup_text(data),
        "### Targets (issue 29)\n\n" + targets_table(targets(data)),
        "### Streams (medians over rounds; TTFT from the moment all requests were made)\n\n" + results_table(data),
    ]
    if image:
        parts.append(f"![aggregate tokens/s vs streams]({image})")
    return "\n\n".join(parts)


def markdown(doc: dict[str, Any]) -> str:
    """The whole report, titled, its plot beside it."""
    title = f"# LLM streams: {model_label(doc['data']['config'])} ({doc['name']})"
    return f"{title}\n\n{body(doc, next(iter(doc['images']), None))}\n"


def plot(data: dict[str, Any], path: Path) -> None:
    """Aggregate output tokens/s against the number of streams, one line per engine (log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for engine in data["config"]["engines"]:
        points = [(n, _get(data, engine, n, "tokens_per_s")) for n in data["config"]["streams"]]
        points = [(n, v) for n, v in points if v is not None]
        if points:
            ax.plot(*zip(*points), marker="o", label=ENGINES.get(engine, engine))
    streams = data["config"]["streams"]
    ax.set_xscale("log", base=2)
    ax.set_xticks(streams, [str(n) for n in streams])
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("aggregate output tokens/s")
    c = data["config"]
    ax.set_title(f"{model_label(c)}: prompt {c['prompt']}, {c['new']} new, {c['threads']} threads")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

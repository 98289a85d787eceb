"""What the LLM prefix-caching benchmark's numbers say: medians over rounds, tokens with the cache
against without, issue 39's targets (PASS/MISS) and the markdown report (``llm_prefix.py`` draws the plot).

Pure functions of the ``data`` of its results document (``llm_prefix.py`` collects it, see
``benchmarks.common``): ``config``; ``runs``, every measuring process (workload, engine, round, the
load average before and after, its result from ``llm_prefix_child.py``); ``summary[workload][engine]``
the medians over rounds; ``tokens``, each engine's tokens with its cache against without.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from benchmarks.common import conditions
from benchmarks.report import ratio_text, target, targets_table

__all__ = ["CACHE_PAIRS", "ENGINES", "TARGETS", "body", "compare_cache", "get", "markdown", "summarize", "targets"]

ENGINES = {  # name -> what the tables call it
    "ortstate": "ortstate ContinuousBatcher, prefix caching",
    "ortstate-nocache": "ortstate ContinuousBatcher, no prefix caching",
    "ov-cache": "OpenVINO GenAI CB, exact config, enable_prefix_caching",
    "ov-nocache": "OpenVINO GenAI CB, exact config, no prefix caching",
    "ortstate-schema": "ortstate ContinuousBatcher, json_schema",
}
STRUCTURED = {"ortstate": "ortstate ContinuousBatcher, unconstrained"}  # its own name in that workload
CACHE_PAIRS = {"ortstate": "ortstate-nocache", "ov-cache": "ov-nocache"}  # with the cache -> without
TARGETS = {"turn_ttft": 0.15, "shared_total": 0.12, "over_ov": 1.0, "schema_rate": 0.9}
# the anchor measured before (DESIGN.md, "What an LLM server's users expect"; Intel Xeon, 2 threads)
ANCHOR = {"chat_turn8_ms": (310.0, 2505.0), "shared_total_s": (12.9, 152.3)}
SCALARS = ("total_s", "ttft_p50_ms", "ttft_p99_ms", "tokens_per_s", "itl_p50_ms", "itl_p99_ms")
SCALARS += ("answer_tokens_mean", "valid", "answers", "load_s")


def _median(values: list[Any]) -> float | None:
    kept = [v for v in values if isinstance(v, (int, float))]
    return float(np.median(kept)) if kept else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Medians over rounds: ``{workload: {engine: {metric: median, "turn_ttft_ms": [...], ...}}}``.
    A cell whose every round failed keeps the first failure as ``error``; ``valid`` is the fewest."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["workload"], run["engine"]), []).append(run)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (workload, engine), rounds in cells.items():
        ok = [r["result"] for r in rounds if "error" not in r["result"]]
        cell: dict[str, Any] = {"rounds": len(rounds), "ok_rounds": len(ok)}
        if not ok:
            cell["error"] = rounds[0]["result"]["error"]
        for key in SCALARS:
            values = [r.get(key) for r in ok]
            cell[key] = min(values) if key == "valid" and None not in values and values else _median(values)
        if ok and "turns" in ok[0]:
            cell["turn_prompt"] = [t["prompt"] for t in ok[0]["turns"]]
            cell["turn_ttft_ms"] = [_median([r["turns"][i]["ttft_ms"] for r in ok]) for i in range(len(ok[0]["turns"]))]
        invalid = [p for r in ok for p in r.get("invalid", [])]
        if invalid:
            cell["invalid"] = invalid[0]
        notes = sorted({r["note"] for r in ok if r.get("note")})
        if notes:
            cell["note"] = "; ".join(notes)
        out.setdefault(workload, {})[engine] = cell
    return out


def compare_cache(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """Per engine with a cache and workload: how many answers (turns, requests) of every round equal
    the same engine's without the cache (its first round that ran): ``{engine: {workload: {"equal",
    "compared"}}}``. A chat's turns after a differing one differ too (their prompts hold it)."""
    reference: dict[tuple[str, str], list[list[int]]] = {}
    for run in runs:
        if "error" not in run["result"]:
            reference.setdefault((run["workload"], run["engine"]), run["result"]["tokens"])
    out: dict[str, dict[str, dict[str, int]]] = {}
    for run in runs:
        without = CACHE_PAIRS.get(run["engine"])
        ref = reference.get((run["workload"], without or ""))
        if ref is None or "error" in run["result"]:
            continue
        cell = out.setdefault(run["engine"], {}).setdefault(run["workload"], {"equal": 0, "compared": 0})
        for mine, theirs in zip(run["result"]["tokens"], ref):
            cell["compared"] += 1
            cell["equal"] += mine == theirs
    return out


def get(data: dict[str, Any], workload: str, engine: str, key: str) -> Any:
    value = data.get("summary", {}).get(workload, {}).get(engine, {}).get(key)
    return None if isinstance(value, float) and math.isnan(value) else value


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def last_turn(data: dict[str, Any], engine: str) -> float | None:
    turns = get(data, "chat", engine, "turn_ttft_ms")
    return turns[-1] if turns else None


def _compare(name: str, a: float | None, b: float | None, limit: float, unit: str, fmt: str) -> dict[str, Any]:
    """``a`` ≤ ``limit`` × ``b``, or n/a where either was not measured."""
    r = _ratio(a, b)
    return target(
        name, r, None if r is None else r <= limit, f"{_num(a, fmt)} vs {_num(b, fmt)} {unit} = {ratio_text(r)}"
    )


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 39's targets on this run (n/a where an engine or workload was not measured), and the
    check that the cache changes no token."""
    s, t = data["config"]["spec"], TARGETS
    turn = f"turn-{s['turns']}"
    shared = f"{s['requests']} requests sharing a {s['system']:,}-token system prompt"
    out = [
        _compare(
            f"chat: {turn} TTFT with the cache ≤ {t['turn_ttft']}× without",
            last_turn(data, "ortstate"),
            last_turn(data, "ortstate-nocache"),
            t["turn_ttft"],
            "ms",
            ",.0f",
        ),
        _compare(
            f"{shared}: total with the cache ≤ {t['shared_total']}× without",
            get(data, "shared", "ortstate", "total_s"),
            get(data, "shared", "ortstate-nocache", "total_s"),
            t["shared_total"],
            "s",
            ",.2f",
        ),
    ]
    for workload, label in (("chat", f"chat ({s['turns']} turns)"), ("shared", shared)):
        for key, what, unit, fmt in (("ttft_p50_ms", "TTFT p50", "ms", ",.0f"), ("total_s", "total", "s", ",.2f")):
            out.append(
                _compare(
                    f"{label}: {what} ≤ OpenVINO GenAI's with its prefix caching",
                    get(data, workload, "ortstate", key),
                    get(data, workload, "ov-cache", key),
                    t["over_ov"],
                    unit,
                    fmt,
                )
            )
    out += [_schema_rate(data), _schema_valid(data), _same_tokens(data)]
    return out


def _schema_rate(data: dict[str, Any]) -> dict[str, Any]:
    n, limit = data["config"]["spec"]["streams"], TARGETS["schema_rate"]
    a, b = (
        get(data, "structured", "ortstate-schema", "tokens_per_s"),
        get(data, "structured", "ortstate", "tokens_per_s"),
    )
    r = _ratio(a, b)
    name = f"structured output: tokens/s with a schema ≥ {limit}× unconstrained at {n} streams"
    return target(
        name, r, None if r is None else r >= limit, f"{_num(a, ',.1f')} vs {_num(b, ',.1f')} tok/s = {ratio_text(r)}"
    )


def _schema_valid(data: dict[str, Any]) -> dict[str, Any]:
    valid, answers = (
        get(data, "structured", "ortstate-schema", "valid"),
        get(data, "structured", "ortstate-schema", "answers"),
    )
    name = "structured output: every answer valid JSON of its schema"
    if valid is None or not answers:
        return target(name, None, None, "n/a")
    invalid = get(data, "structured", "ortstate-schema", "invalid")
    detail = f"{valid:.0f} of {answers:.0f} (the worst round)" + (f"; first invalid: {invalid}" if invalid else "")
    return target(name, valid / answers, valid == answers, detail)


def _same_tokens(data: dict[str, Any]) -> dict[str, Any]:
    cells = data.get("tokens", {}).get("ortstate", {})
    equal, compared = sum(c["equal"] for c in cells.values()), sum(c["compared"] for c in cells.values())
    name = "ortstate's tokens with the cache = without (chat turns and shared requests, every round)"
    if not compared:
        return target(name, None, None, "n/a")
    return target(name, equal / compared, equal == compared, f"{equal} of {compared} equal")


# -- the report ---------------------------------------------------------------------------------------
def _cell(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def _loads(data: dict[str, Any], workload: str, engine: str) -> str:
    return "; ".join(
        f"{r['loadavg_before'][0]:.2f} → {r['loadavg_after'][0]:.2f}"
        for r in data["runs"]
        if r["workload"] == workload and r["engine"] == engine
    )


def _same(data: dict[str, Any], workload: str, engine: str) -> str:
    c = data.get("tokens", {}).get(engine, {}).get(workload)
    return "" if c is None else f"{c['equal']}/{c['compared']}"


def _label(workload: str, engine: str) -> str:
    return (STRUCTURED if workload == "structured" else ENGINES).get(engine, ENGINES.get(engine, engine))


def _row_start(data: dict[str, Any], workload: str, engine: str, columns: int) -> tuple[str, dict | None]:
    """The row's engine cell, and its summary (None: a "not available" row, returned whole)."""
    cell = data["summary"].get(workload, {}).get(engine)
    if cell is None:
        return "", None
    label = _label(workload, engine)
    if "error" in cell:
        return f"| {label} | not available: {cell['error']} |" + " |" * (columns - 2), None
    return f"| {label}" + (f" ({cell['note']})" if cell.get("note") else "") + " |", cell


def chat_table(data: dict[str, Any]) -> str:
    """TTFT of every turn per engine, the chat's total and the tokens against the cache-less run."""
    s = data["config"]["spec"]
    engines = [e for e in data["config"]["engines"].get("chat", []) if e in data["summary"].get("chat", {})]
    prompts = [s["turn_tokens"] * t + s["turn_new"] * (t - 1) for t in range(1, s["turns"] + 1)]
    head = "| engine | " + " | ".join(f"turn {t} ({p})" for t, p in enumerate(prompts, 1))
    lines = [head + " | total s | tokens = no cache | load avg before → after |"]
    lines.append("| --- |" + " ---: |" * (len(prompts) + 2) + " --- |")
    for engine in engines:
        start, cell = _row_start(data, "chat", engine, len(prompts) + 4)
        if cell is None:
            lines.append(start)
            continue
        turns = " | ".join(_cell(v, ",.0f") for v in cell.get("turn_ttft_ms") or [])
        lines.append(
            f"{start} {turns} | {_cell(cell['total_s'], ',.2f')} | {_same(data, 'chat', engine)} "
            f"| {_loads(data, 'chat', engine)} |"
        )
    return "\n".join(lines)


def shared_table(data: dict[str, Any], workload: str) -> str:
    """The requests-at-once workloads: total, TTFT, tokens/s (structured: validity, answer length)."""
    structured = workload == "structured"
    extra = "| valid answers | mean answer tokens " if structured else "| tokens = no cache "
    lines = [f"| engine | total s | TTFT p50 / p99 ms | tokens/s | ITL p50 / p99 ms {extra}| load avg before → after |"]
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if structured else "") + " --- |")
    for engine in data["config"]["engines"].get(workload, []):
        start, cell = _row_start(data, workload, engine, 8 if structured else 7)
        if cell is None:
            if start:
                lines.append(start)
            continue
        if structured:
            answers = cell.get("answers")
            valid = f"{cell['valid']:.0f}/{answers:.0f}" if answers else "n/a"
            tail = f"| {valid} | {_cell(cell['answer_tokens_mean'], ',.1f')} "
        else:
            tail = f"| {_same(data, workload, engine)} "
        lines.append(
            f"{start} {_cell(cell['total_s'], ',.2f')} | {_cell(cell['ttft_p50_ms'], ',.0f')} / "
            f"{_cell(cell['ttft_p99_ms'], ',.0f')} | {_cell(cell['tokens_per_s'], ',.1f')} | "
            f"{_cell(cell['itl_p50_ms'], ',.1f')} / {_cell(cell['itl_p99_ms'], ',.1f')} {tail}| "
            f"{_loads(data, workload, engine)} |"
        )
    return "\n".join(lines)


def anchor_text(data: dict[str, Any]) -> str:
    """OpenVINO GenAI here against the anchor measured before on another machine (DESIGN.md)."""
    (c8, n8), (cs, ns) = ANCHOR["chat_turn8_ms"], ANCHOR["shared_total_s"]
    here = (last_turn(data, "ov-cache"), last_turn(data, "ov-nocache"))
    shared = (get(data, "shared", "ov-cache", "total_s"), get(data, "shared", "ov-nocache", "total_s"))
    return (
        "OpenVINO GenAI against the anchor measured before (DESIGN.md; Intel Xeon, 2 threads, the issue's sizes): "
        f"last-turn TTFT {_num(here[0], ',.0f')} ms with caching, {_num(here[1], ',.0f')} ms without (anchor: "
        f"turn 8 {c8:,.0f} ms / {n8:,.0f} ms); shared system prompt total {_num(shared[0], ',.2f')} s / "
        f"{_num(shared[1], ',.2f')} s (anchor: {cs} s / {ns} s). Another machine: read the ratios."
    )


def setup_text(data: dict[str, Any]) -> str:
    c, s = data["config"], data["config"]["spec"]
    kv = c["kv_cache_gb"].items()
    return "\n".join(
        [
            f"- model: {c['model']} (`{c['model_dir']}`), {c['threads']} threads, {c['rounds']} round(s) (medians), "
            f"seed {c['seed']}, greedy, eos ignored; prompt chunks of {s['batched']} tokens (both engines' "
            f"max_num_batched_tokens); OV GenAI KV cache {', '.join(f'{w} {g} GiB' for w, g in kv)}",
            f"- chat: {s['turns']} turns, each +{s['turn_tokens']} new prompt ids after the previous turn's "
            f"{s['turn_new']} generated tokens, one request at a time",
            f"- shared: {s['requests']} requests of a {s['system']:,}-id system prompt + {s['own']} own ids, "
            f"{s['shared_new']} new each, all at once, the system prompt requested once before (untimed)",
            f"- structured: {s['streams']} streams of {s['prompt']} ids, up to {s['new']} new tokens each, "
            "all at once, with and without the JSON schema (compiled in the untimed warm-up)",
        ]
    )


def body(doc: dict[str, Any], image: str | None) -> str:
    """The report without its title: conditions, setup, targets, the tables, the plot (``image``)."""
    data = doc["data"]
    parts = [
        conditions(doc),
        setup_text(data),
        "### Targets (issue 39)\n\n" + targets_table(targets(data)),
        "### Chat: time to first token per turn, ms (prompt tokens)\n\n" + chat_table(data),
        "### Shared system prompt (TTFT from the moment all requests were made)\n\n" + shared_table(data, "shared"),
        "### Structured output\n\n" + shared_table(data, "structured"),
        anchor_text(data),
    ]
    if image:
        parts.append(f"![TTFT per turn, with and without prefix caching]({image})")
    return "\n\n".join(parts)


def markdown(doc: dict[str, Any]) -> str:
    title = f"# LLM prefix caching: {doc['data']['config']['model']} ({doc['name']})"
    return f"{title}\n\n{body(doc, next(iter(doc['images']), None))}\n"

"""The one results document (benchmarks/common.py): what write_results writes and refuses, the
machine as ortstate's CPU reader gives it, the conditions a rendering opens with, every committed
result in that shape, and the conversion of results written before it (benchmarks/upgrade_results.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks import common, upgrade_results
from benchmarks.common import RESULTS, SCHEMA, shape_problems
from ortstate.timing import cpu_name, isa_flags

BENCHMARKS = Path(common.__file__).resolve().parent


def _render(doc: dict) -> str:
    return f"# A run\n\n{common.conditions(doc)}\n\n{doc['data']['rows']} rows\n"


def test_write_results_writes_the_one_document_and_its_rendering(tmp_path) -> None:
    run = common.start_run("test")
    doc = common.write_results(tmp_path, "a", run, {"rows": 3}, _render, lambda d, out: ["a.png"])
    assert json.loads((tmp_path / "a.json").read_text()) == doc and shape_problems(doc) == []
    assert (doc["schema"], doc["suite"], doc["name"], doc["started"], doc["images"]) == (
        SCHEMA,
        "test",
        "a",
        run.started,
        ["a.png"],
    )
    assert len(doc["load"]["before"]) == len(doc["load"]["after"]) == 3
    assert doc["data"] == {"rows": 3} and doc["versions"]["ortstate"] == common.versions()["ortstate"]
    assert doc["source"]["commit"] is None or len(doc["source"]["commit"]) == 40
    assert (tmp_path / "a.md").read_text() == _render(doc)


def test_the_machine_is_what_ortstates_cpu_reader_says() -> None:
    assert common.machine() == {"cpu": cpu_name(), "cpu_flags": isa_flags(), "cores": os.cpu_count()}
    readers = [p.name for p in BENCHMARKS.glob("*.py") if "cpuinfo" in p.read_text(encoding="utf-8")]
    assert readers == []  # ortstate.runtime.cpu is the one reader of /proc/cpuinfo


@pytest.mark.parametrize(
    ("markdown", "why"),
    [("A run\n\nRun {started}\n", "a '# ' title"), ("# A run\n\nno stamp\n", "name its run")],
)
def test_write_results_refuses_a_rendering_the_doc_cannot_take(tmp_path, markdown: str, why: str) -> None:
    run = common.start_run("test")
    with pytest.raises(ValueError, match=why):
        common.write_results(tmp_path, "a", run, {}, lambda doc: markdown.format(started=doc["started"]))
    assert list(tmp_path.iterdir()) == []  # nothing half written


def test_the_conditions_say_what_a_run_did_not_record(results_doc) -> None:
    recorded = common.conditions(results_doc({}))
    assert recorded == (
        "Run 2026-01-01T00:00:00 (60 s); CPU X, 2 cores (avx2, fma); Python 3.11.7, onnxruntime 1.31.1, OpenVINO "
        "2026.4.1, ortstate 0.1.0 (main 0123456789). Load average (1/5/15 min) 0.50/0.40/0.30 before, "
        "0.70/0.50/0.30 after: the machine is shared, read ratios between what ran in this run."
    )
    nothing = results_doc({}, started=None, seconds=None, load={"before": None, "after": None})
    nothing |= {"machine": dict.fromkeys(["cpu", "cpu_flags", "cores"]), "source": dict.fromkeys(["commit"])}
    nothing["versions"] = {"ortstate": None}
    assert common.conditions(nothing) == (
        "Run at a time not recorded; CPU not recorded, ? cores (flags not recorded); ortstate n/a. Load average "
        "(1/5/15 min) n/a before, n/a after: the machine is shared, read ratios between what ran in this run."
    )


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_committed_result_is_in_the_one_shape(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert shape_problems(doc) == []
    assert doc["name"] == path.stem
    markdown = path.with_suffix(".md").read_text(encoding="utf-8")
    assert markdown.startswith("# ") and (doc["started"] is None or doc["started"] in markdown)
    assert all((RESULTS / image).is_file() for image in doc["images"])


# -- results written before the one shape -----------------------------------------------------------

MACHINE = {"cpu": "AMD EPYC", "cores": 2, "python": "3.11.7", "isa": "avx avx2 fma", "ortstate": "0.1.0"}
MACHINE |= {"onnxruntime": "1.31.1", "openvino": "2026.4.1", "cpu_flags": ["avx2", "fma"]}
OLD = {
    "latest": (
        {"schema": "ortstate.bench-suite/1", "started": "2026-11-27T15:28:05", "quick": False, "machine": MACHINE}
        | {"config": {"demo_steps": 10}, "demo": {"p50_us": 1.5}, "seconds": 68.6, "load": [0.39, 1.0]},
        "# ortstate benchmarks: latest run\n\nRun 2026-11-27T15:28:05 ...\n\n![demo.png](demo.png)\n",
    ),
    "llm-streams": (
        {"schema": "ortstate.llm-streams/1", "started": "2026-11-27T14:40:57", "machine": MACHINE}
        | {"versions": {"openvino-genai": "missing", "ortstate": "0.1.0 (main 7363892, modified)"}}
        | {"config": {"streams": [1]}, "loadavg_start": [0.18, 0.69, 1.05], "runs": [], "loadavg_end": [1.9, 1.8, 1.5]},
        "# LLM streams: int4 (llm-streams)\n\n- started 2026-11-27T14:40:57\n",
    ),
    "realsize": (
        {"schema": "ortstate.realsize/1", "model": "m", "started": "2026-11-23T18:42:01", "machine": MACHINE}
        | {"ortstate": "0.1.0 (issue-12e 21910fa)", "config": {}, "engines": [], "skipped": {}, "seconds": 721.0}
        | {
            "precisions": [
                {"precision": "int4", "loadavg": [0.93, 1.82]},
                {"precision": "fp32", "loadavg": [1.85, 1.8]},
            ]
        },
        "# Real-size benchmark: realsize\n\nRun 2026-11-23T18:42:01 ...\n",
    ),
    "realsize-grouped-kernel-first": (
        {"machine": MACHINE, "load_before": [1.19, 1.55, 1.59], "load_after": [1.86, 1.67, 1.63], "steps": 100}
        | {"rows": [{"context": 32, "kernel_ms": 25.21, "grouped_ms": 27.65, "max_dlogits": 0.0}]},
        "### The grouped decode step on and off (int4, 14 query heads over 2 KV heads, one process, alternating)\n\n"
        "AMD EPYC, 2 threads; load average 1.19 before, 1.86 after; median of 98 steps each.\n",
    ),
    "serve": (
        {"machine": MACHINE, "load_before": [0.38, 0.87, 1.55], "load_after": [0.68, 0.91, 1.55], "rounds": [1]},
        "### `ortstate serve`: 256 streams\n\nAMD EPYC, 2 cores; load average 0.38 before, 0.68 after; 2026-11-27.\n",
    ),
    "streams": ({"steps": 100, "threads": 1, "lstm_h16_l2": [{"runner": "pool", "streams": 1}]}, "### hidden 16\n"),
}


def test_old_results_convert_to_the_one_shape_losing_nothing(tmp_path) -> None:
    for name, (doc, markdown) in OLD.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
        (tmp_path / f"{name}.md").write_text(markdown)
    (tmp_path / "demo.png").write_bytes(b"")
    assert sorted(upgrade_results.upgrade_folder(tmp_path)) == sorted(OLD)
    new = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in OLD}
    for name, doc in new.items():
        assert shape_problems(doc) == [], name
        assert upgrade_results.lost(OLD[name][0], doc) == [], name
        assert (tmp_path / f"{name}.md").read_text().startswith("# "), name
    latest, streams_run, real = new["latest"], new["llm-streams"], new["realsize"]
    grouped, serve = new["realsize-grouped-kernel-first"], new["serve"]
    assert latest["load"] == {"before": [0.39], "after": [1.0]} and latest["images"] == ["demo.png"]
    assert latest["machine"] == {"cpu": "AMD EPYC", "cpu_flags": ["avx", "avx2", "fma"], "cores": 2}
    assert latest["data"] == {"quick": False, "config": {"demo_steps": 10}, "demo": {"p50_us": 1.5}}
    assert streams_run["source"] == {"commit": "7363892", "branch": "main", "dirty": True}
    assert streams_run["versions"]["openvino-genai"] is None and streams_run["load"]["after"] == [1.9, 1.8, 1.5]
    assert real["load"] == {"before": [0.93], "after": [1.8]} and real["data"]["model"] == "m"
    assert grouped["data"]["first"] == "kernel" and grouped["data"]["threads"] == 2 and grouped["started"] is None
    assert serve["started"] == "2026-11-27"  # the day its markdown names
    assert new["streams"]["machine"] == {"cpu": None, "cpu_flags": None, "cores": None}  # never recorded
    assert (tmp_path / "streams.md").read_text().startswith("# Many streams: a StreamPool against one request")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert upgrade_results.upgrade_folder(tmp_path) == []  # again: nothing to do
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_value_the_conversion_would_drop_is_caught() -> None:
    old, _ = OLD["serve"]
    new, _ = upgrade_results.upgrade("serve", old, OLD["serve"][1], [])
    new["data"]["rounds"] = []
    assert upgrade_results.lost(old, new) == [1]


def test_an_unknown_results_file_is_refused(tmp_path) -> None:
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    assert upgrade_results.main([str(tmp_path)]) == 2
    assert json.loads((tmp_path / "other.json").read_text()) == {"rows": []}


def _renderers() -> dict:
    """Each suite's markdown of a results document (the per-step suite renders from its live
    results, which its JSON keeps only the medians of)."""
    from benchmarks import (
        grammar_masks,
        llm_prefix_report,
        llm_streams_profile,
        llm_streams_report,
        openai_serve,
        realsize,
        realsize_grouped,
        realsize_profile,
        serve,
        streams,
        weights_kernels,
    )

    return {
        "real-size": realsize.markdown,
        "real-size-context": realsize.markdown,
        "real-size-profile": realsize_profile.markdown,
        "llm-streams": llm_streams_report.markdown,
        "llm-streams-profile": llm_streams_profile.markdown,
        "llm-prefix": llm_prefix_report.markdown,
        "serve": serve.markdown,
        "serve-durable": serve.durable_markdown,
        "openai-serve": openai_serve.markdown,
        "streams": streams.markdown,
        "grouped": realsize_grouped.markdown,
        "weights-kernels": weights_kernels.markdown,
        "grammar-masks": grammar_masks.markdown,
    }


RERENDERED = [p for p in sorted(RESULTS.glob("*.json")) if json.loads(p.read_text())["suite"] != "per-step"]


@pytest.mark.parametrize("path", RERENDERED, ids=lambda p: p.name)
def test_a_committed_result_renders_again_with_the_same_tables(path: Path) -> None:
    """Today's renderer of its suite, given the committed document (converted or not), gives back
    every table row the run rendered then: the figures survive the one shape."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    again = _renderers()[doc["suite"]](doc)
    assert again.startswith("# ") and (doc["started"] is None or doc["started"] in again)
    rows = [line for line in path.with_suffix(".md").read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    assert rows and [row for row in rows if row not in again.splitlines()] == []

"""scripts/make_performance_doc.py: docs/performance.md put together from the results documents in
a results folder (the one shape of benchmarks/common.py) and the markdown each run rendered."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import make_performance_doc as perfdoc  # noqa: E402


def _results(folder: Path, name: str, data: dict, md: str | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
    if md is not None:
        (folder / f"{name}.md").write_text(md, encoding="utf-8")


def test_performance_doc_orders_runs_shifts_headings_and_rebases_links(tmp_path, results_doc):
    results, doc = tmp_path / "bench" / "results", tmp_path / "docs" / "performance.md"
    real = "# Real size\n\nRun 2026-01-02.\n\n### Table\n\n![plot](real.png)\n\n```\n# not a heading\n```\n"
    _results(results, "realsize-a", results_doc({}, "real-size", "realsize-a", started="2026-01-02"), real)
    suite = "# Suite\n\nRun 2026-01-01 ([more](../README.md#x), [web](https://example.com)).\n\n#### Deep\n"
    unknown = results_doc({}, "per-step", "latest", started="2026-01-01")  # converted: nothing recorded
    unknown |= {"machine": dict.fromkeys(["cpu", "cpu_flags", "cores"]), "source": dict.fromkeys(unknown["source"])}
    unknown["versions"] = dict.fromkeys(unknown["versions"])
    _results(results, "latest", unknown, suite)
    text = perfdoc.render(results, doc)
    assert text.startswith(perfdoc.HEADER)
    runs = text.split("## Runs\n\n")[1].split("\n\n")[0].splitlines()
    assert runs[2:] == [
        "| [Suite](#suite) | [`latest.json`](../bench/results/latest.json) | 2026-01-01 | — | — |",
        "| [Real size](#real-size) | [`realsize-a.json`](../bench/results/realsize-a.json) | 2026-01-02 "
        "| CPU X, 2 cores | ortstate 0.1.0 (main 0123456), onnxruntime 1.31.1, OpenVINO 2026.4.1 |",
    ]
    assert text.index("## Suite") < text.index("## Real size")
    assert "### Deep\n" in text and "### Table\n" in text and "\n# not a heading\n" in text
    assert "![plot](../bench/results/real.png)" in text
    assert "([more](../bench/README.md#x), [web](https://example.com))" in text


@pytest.mark.parametrize(
    ("md", "message"),
    [
        (
            "# Suite\n\nRun 2025-12-31.\n",
            "latest.md: not rendered from latest.json (its run 2026-01-01 is not named in it)",
        ),
        ("Run 2026-01-01, no title\n", "latest.md: no '# ' title line (not a benchmark's rendering)"),
    ],
)
def test_performance_doc_refuses_results_that_disagree(tmp_path, capsys, results_doc, md, message):
    _results(tmp_path, "latest", results_doc({}, "per-step", "latest", started="2026-01-01"), md)
    with pytest.raises(perfdoc.DocError) as info:
        perfdoc.render(tmp_path, tmp_path / "performance.md")
    assert str(info.value) == f"{tmp_path}/{message}"
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(tmp_path / "p.md")]) == 2
    assert capsys.readouterr().err == f"make_performance_doc: error: {tmp_path}/{message}\n"
    assert not (tmp_path / "p.md").exists()


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (  # a result of before the one shape
            {"schema": "ortstate.realsize/1", "started": "2026-01-01", "machine": {}},
            "schema 'ortstate.realsize/1', not 'ortstate.results/1'",
        ),
        ({"schema": "someone-else/1"}, "schema 'someone-else/1', not 'ortstate.results/1'"),
        (["not", "a", "document"], "a JSON list, not an object"),
        ({"schema": "ortstate.results/1", "suite": "x"}, "no 'name'; no 'started'; no 'seconds'; no 'machine'"),
    ],
)
def test_performance_doc_refuses_a_json_of_another_shape(tmp_path, capsys, document, problem):
    """Nothing in the results folder is left out silently: a JSON of another shape is an error."""
    _results(tmp_path, "other", document, "# Other\n")
    message = f"{tmp_path}/other.json: not a results document ({problem}"
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(tmp_path / "p.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"make_performance_doc: error: {message}") and err.count("\n") == 1
    assert err.endswith(
        "results written before the one shape convert with python -m benchmarks.upgrade_results, "
        "other files belong elsewhere\n"
    )


def _realsize(folder: Path, name: str, started: str, results_doc) -> None:
    run = results_doc({}, "real-size", name, started=started)
    _results(folder, name, run, f"# Real-size benchmark: {name}\n\nRun {started}.\n")


def test_performance_doc_shows_a_baseline_until_its_own_run_is_there(tmp_path, results_doc):
    """realsize-before.json is the real-size section until realsize.json arrives; then it is
    only listed, and whatever else is missing (here the bench suite) leaves no gap."""
    results, doc = tmp_path / "results", tmp_path / "docs" / "performance.md"
    _realsize(results, "realsize-before", "2026-01-01", results_doc)
    text = perfdoc.render(results, doc)
    assert "## Real-size benchmark: realsize-before\n\nRun 2026-01-01." in text
    assert "not shown" not in text

    _realsize(results, "realsize", "2026-02-02", results_doc)
    text = perfdoc.render(results, doc)
    assert "## Real-size benchmark: realsize\n\nRun 2026-02-02." in text
    assert "realsize-before\n" not in text and "2026-01-01" not in text
    assert (
        "Results files not shown here:\n\n"
        "- [`realsize-before.json`](../results/realsize-before.json): the baseline of `realsize.json`, shown instead\n"
    ) in text


def test_performance_doc_lists_a_run_without_its_rendering_and_warns(tmp_path, capsys, results_doc):
    results, out = tmp_path / "results", tmp_path / "docs" / "performance.md"
    _realsize(results, "realsize", "2026-02-02", results_doc)
    _results(results, "latest", results_doc({}, "per-step", "latest"), None)
    assert perfdoc.main(["--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "- [`latest.json`](../results/latest.json): not rendered: no `latest.md` beside it\n" in text
    assert "## Real-size benchmark: realsize\n" in text
    assert capsys.readouterr().err.splitlines() == [
        f"make_performance_doc: warning: {results}/latest.json: not rendered: no latest.md beside it "
        "(rerun the benchmark)",
        f"wrote {out}",
    ]


def test_performance_doc_without_results(tmp_path):
    (tmp_path / "results").mkdir()
    text = perfdoc.render(tmp_path / "results", tmp_path / "docs" / "performance.md")
    assert text == perfdoc.HEADER + "\n## Runs\n\nNo benchmark results rendered from `../results` yet.\n"
    with pytest.raises(perfdoc.DocError, match="nowhere: no such results folder"):
        perfdoc.render(tmp_path / "nowhere", tmp_path / "docs" / "performance.md")


def test_performance_doc_check_mode(tmp_path, capsys, results_doc):
    _results(tmp_path, "latest", results_doc({}, "per-step", "latest", started="s1"), "# Suite\n\nRun s1.\n")
    out = tmp_path / "docs" / "performance.md"
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(out), "--check"]) == 1
    assert not out.exists()
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(out)]) == 0
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(out), "--check"]) == 0
    out.write_text(out.read_text() + "typed by hand\n")
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(out), "--check"]) == 1
    assert "is out of date: run python scripts/make_performance_doc.py" in capsys.readouterr().err

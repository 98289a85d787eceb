"""Every benchmark suite through its entry point (``python -m benchmarks NAME``): its ``--help``, and
where a tiny configuration runs in seconds on the committed tiny models, a smoke run whose results
are the one results document (``benchmarks.common``) that docs/performance.md can be made from.
Never a timing: what a smoke run measures is noise on a shared machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import benchmarks.__main__ as entry
from benchmarks.common import shape_problems

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import make_performance_doc as perfdoc  # noqa: E402

LLM = "onnxruntime 1.23, the last with a Python 3.10 wheel, has no GroupQueryAttention causal attribute"


def test_the_entry_point_lists_every_suite_and_refuses_an_unknown_one() -> None:
    listed = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert listed.returncode == 0 and listed.stdout.startswith("usage: python -m benchmarks NAME [args...]")
    assert {line.split()[0] for line in listed.stdout.split("suites:\n")[1].splitlines()} == set(entry.SUITES)
    unknown = subprocess.run([sys.executable, "-m", "benchmarks", "nosuch"], cwd=ROOT, capture_output=True, text=True)
    assert unknown.returncode == 2 and unknown.stderr.startswith("python -m benchmarks: no suite 'nosuch'\n")


@pytest.mark.parametrize("name", sorted(entry.SUITES))
def test_every_suite_answers_help(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the entry point names the suite in sys.argv[0]
    with pytest.raises(SystemExit) as done:
        entry.main([name, "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert out.startswith(f"usage: python -m benchmarks {name}")
    assert "--help" in out and len(out.splitlines()) > 4  # options, each said


def _smoke(name: str, args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Run suite ``name`` with ``args`` into ``tmp_path``; its results documents, each checked."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert entry.main([name, *args, "--out", str(tmp_path)]) == 0
    docs = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]
    assert docs
    for doc in docs:
        assert shape_problems(doc) == []
        markdown = (tmp_path / f"{doc['name']}.md").read_text()
        assert markdown.startswith("# ") and doc["started"] in markdown
        assert all((tmp_path / image).is_file() for image in doc["images"])
        assert doc["load"]["before"] and doc["load"]["after"] and doc["machine"]["cores"]
    found = perfdoc.collect(tmp_path)  # docs/performance.md takes them as they are
    assert len(found.runs) == len(docs) and not found.left_out
    return docs


SMOKE = [
    ("streams", ["--counts", "1,2", "--steps", "2"], "streams", False),
    (
        "grouped",
        ["--model-dir", "models/llm/qwen2", "--contexts", "8,16", "--steps", "3", "--threads", "1"],
        "grouped",
        True,
    ),
    (
        "llm-streams-profile",
        ["--model-dir", "models/llm/llama", "--streams", "2", "--prompt", "8", "--new", "4", "--threads", "1"],
        "llm-streams-profile",
        True,
    ),
    ("llm-streams", ["--quick", "--engines", "pool"], "llm-streams", True),
    ("serve", ["--rounds", "1", "--streams", "4", "--steps", "5"], "serve", False),
    (
        "openai-serve",
        ["models/llm/llama", "--streams", "2", "--prompt", "8", "--new", "4", "--history", "16", "--rounds", "1"],
        "openai-serve",
        True,
    ),
    (
        "grammar-masks",
        ["--tokenizer", "models/llm/qwen2/tokenizer.json", "--rows", "1,2", "--threads", "1", "--rounds", "1"]
        + ["--items", "1", "--engines", "llguidance,ortstate"],
        "grammar-masks",
        False,
    ),
    (
        "weights-kernels",
        ["--shapes", "k/v 896x128", "--variants", "f32 MatMul", "--rounds", "2", "--copies", "1", "--rows", "1"],
        "weights-kernels",
        False,
    ),
]


@pytest.mark.parametrize(("name", "args", "suite", "llm"), SMOKE, ids=[s[0] for s in SMOKE])
def test_a_tiny_run_writes_the_one_results_document(name, args, suite, llm, tmp_path, monkeypatch) -> None:
    if llm and sys.version_info < (3, 11):
        pytest.skip(LLM)
    monkeypatch.chdir(ROOT)  # the models' paths, as the benchmarks README gives them
    (doc,) = _smoke(name, args, tmp_path, monkeypatch)
    assert doc["suite"] == suite and doc["data"]


def test_the_grouped_suite_sets_its_sessions_through_the_public_setting(tmp_path, monkeypatch) -> None:
    """The grouped session runs the products (its logits differ from the kernel's in the last bits)
    and the kernel's does not; the setting is put back after each load."""
    if sys.version_info < (3, 11):
        pytest.skip(LLM)
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ORTSTATE_GROUPED_DECODE", "auto")
    args = ["--model-dir", "models/llm/qwen2", "--contexts", "8", "--steps", "3", "--threads", "1"]
    (doc,) = _smoke("grouped", args, tmp_path, monkeypatch)
    assert os.environ["ORTSTATE_GROUPED_DECODE"] == "auto"
    (row,) = doc["data"]["rows"]
    assert 0 < row["max_dlogits"] < 1e-4  # two different graphs, the same logits to f32 rounding
    assert doc["data"] | {"rows": None} == {
        "model": "qwen2",
        "heads": 4,
        "kv_heads": 2,
        "threads": 1,
        "steps": 3,
        "first": "kernel",
        "grouped": "on",
        "rows": None,
    }


def test_the_llm_prefix_suite_runs_every_ortstate_engine_on_the_tiny_llama(tmp_path, monkeypatch) -> None:
    """Each workload's ortstate rows: measured, or "not available" for what this ortstate lacks (prefix
    caching, json_schema in the batcher); what ran with the cache gave the tokens it gives without."""
    if sys.version_info < (3, 11):
        pytest.skip(LLM)
    monkeypatch.chdir(ROOT)
    args = ["--quick", "--engines", "ortstate,ortstate-nocache,ortstate-schema"]
    (doc,) = _smoke("llm-prefix", args, tmp_path, monkeypatch)
    assert doc["suite"] == "llm-prefix" and doc["images"] == ["llm-prefix-quick.png"]
    runs = {(r["workload"], r["engine"]): r["result"] for r in doc["data"]["runs"]}
    assert sorted(runs) == sorted(
        [(w, e) for w in ("chat", "shared") for e in ("ortstate", "ortstate-nocache")]
        + [("structured", "ortstate"), ("structured", "ortstate-schema")]
    )
    spec = doc["data"]["config"]["spec"]
    assert [t["prompt"] for t in runs["chat", "ortstate-nocache"]["turns"]] == [12, 28, 44]
    assert [len(t) for t in runs["chat", "ortstate-nocache"]["tokens"]] == [spec["turn_new"]] * spec["turns"]
    assert [len(t) for t in runs["shared", "ortstate-nocache"]["tokens"]] == [spec["shared_new"]] * spec["requests"]
    assert runs["structured", "ortstate"]["answer_tokens_mean"] == spec["new"]
    for workload in ("chat", "shared"):
        cached = runs[workload, "ortstate"]
        assert cached.get("error") == "this ortstate has no prefix caching" or (
            cached["tokens"] == runs[workload, "ortstate-nocache"]["tokens"]
        )
    schema = runs["structured", "ortstate-schema"]
    assert "refuses json_schema" in schema.get("error", "") or schema["valid"] == schema["answers"] == spec["streams"]

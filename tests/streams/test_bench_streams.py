"""``ortstate bench MODEL --streams``: the pool, one session request and one OpenVINO request per
stream, side by side (never timed here: only that it runs and reports every row)."""

from __future__ import annotations

import json
from pathlib import Path

from oracle import REPO, assert_one_line_error, run_cli

LSTM = REPO / "models" / "lstm_1l" / "model.xml"


def test_bench_streams_reports_every_runner_and_count(capsys, tmp_path: Path) -> None:
    code, out, _ = run_cli(capsys, "bench", LSTM, "--streams", "1,3", "--steps", "2", "--json", tmp_path / "s.json")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split(" | ")[0] for r in rows] == ["| 1", "| 3"]
    document = json.loads((tmp_path / "s.json").read_text())
    assert [(r["runner"], r["streams"]) for r in document["rows"]] == [
        (runner, n) for n in (1, 3) for runner in ("pool", "session", "openvino")
    ]
    assert all(r["steps_per_s"] > 0 for r in document["rows"])


def test_bench_streams_refuses_bad_counts_and_unbatchable_models(capsys) -> None:
    code, _, err = run_cli(capsys, "bench", LSTM, "--streams", "0,2")
    assert code == 2
    assert_one_line_error(err, "--streams 0,2: every stream count must be at least 1")
    counter = REPO / "models" / "counter_i64" / "model.xml"
    code, _, err = run_cli(capsys, "bench", counter, "--streams", "2", "--steps", "1", "--no-openvino")
    assert code == 1 and "cannot batch streams" in err and "layer 'scaled' (id 5, Multiply-1)" in err

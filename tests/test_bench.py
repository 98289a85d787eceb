"""``ortstate bench`` and :mod:`ortstate.bench`: outputs, formats, error paths. Never asserts timings."""

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import ortstate
from ortstate import bench
from ortstate.bench.runners import Floor
from ortstate.cli import main

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "ortstate" / "_demo" / "char_lstm.xml"
KV_TOY = ROOT / "models" / "kv_cache_toy" / "model.xml"
LLAMA = ROOT / "models" / "llm" / "llama" / "openvino_model.xml"
LABELS = [bench.LABELS[n] for n in bench.RUNNERS]


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """One short ``ortstate bench`` of the demo LSTM with every output written (captured by hand:
    capsys is per test)."""
    tmp = tmp_path_factory.mktemp("bench")
    argv = ["bench", DEMO, "--steps", 20, "--rounds", 2, "--json", tmp / "b.json", "--markdown", tmp / "b.md"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue(), tmp


def test_table_has_every_runner_and_the_ratio_columns(demo_run):
    code, out, err, _ = demo_run
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("char_lstm.xml: one step per run; 20 steps × 2 rounds, 1 thread(s)")
    assert "| runner | p50 µs | p90 µs | p99 µs | × floor | × OpenVINO |" in lines
    rows = [line for line in lines if line.startswith("| ") and "runner" not in line and "---" not in line]
    assert [r.split(" | ")[0][2:] for r in rows] == LABELS
    floor_row = next(r for r in rows if r.startswith("| floor"))
    assert floor_row.split(" | ")[4] == "1.00×"
    assert next(r for r in rows if r.startswith("| OpenVINO `infer(feeds)`")).split(" | ")[5].strip(" |") == "1.00×"
    assert "round 2/2" in err  # progress goes to stderr


def test_markdown_file_is_the_printed_table(demo_run):
    _, out, _, tmp = demo_run
    assert (tmp / "b.md").read_text(encoding="utf-8") == out


def test_json_schema(demo_run):
    doc = json.loads((demo_run[3] / "b.json").read_text(encoding="utf-8"))
    assert doc["schema"] == "ortstate.bench/1"
    assert {"cpu", "cores", "python", "onnxruntime", "openvino", "ortstate"} <= set(doc["machine"])
    (result,) = doc["results"]
    assert result["workload"] == "char_lstm" and result["steps"] == 20 and result["rounds"] == 2
    assert result["threads"] == 1 and result["model"].endswith("char_lstm.xml")
    assert [r["name"] for r in result["runners"]] == list(bench.RUNNERS)
    for r in result["runners"]:
        assert r["status"] == "ok" and r["label"] == bench.LABELS[r["name"]]
        assert r["samples"] == 40 and len(r["round_p50_us"]) == 2
        for key in ("p50_us", "p90_us", "p99_us", "mean_us", "vs_floor", "vs_openvino"):
            assert isinstance(r[key], float) and r[key] > 0
        assert r["p50_us"] <= r["p90_us"] <= r["p99_us"]
    by_name = {r["name"]: r for r in result["runners"]}
    assert by_name["floor"]["vs_floor"] == 1.0 and by_name["openvino"]["vs_openvino"] == 1.0


def test_no_openvino_leaves_its_rows_out(capsys):
    code, out, err = run_cli(capsys, "bench", DEMO, "--steps", 3, "--rounds", 1, "--no-openvino")
    assert code == 0, err
    assert "OpenVINO `infer" not in out
    assert "| ortstate custom-op form (Python state ops) |" in out
    assert out.splitlines()[-1].endswith("|  |")  # no OpenVINO to compare with: the ratio cell is empty


def test_plot_without_matplotlib_is_one_line_and_not_an_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code, _, err = run_cli(capsys, "bench", DEMO, "--steps", 3, "--rounds", 1, "--plot", tmp_path / "p.png")
    assert code == 0
    assert [line for line in err.splitlines() if "plot" in line] == [
        "ortstate: --plot skipped: plots need matplotlib: pip install 'ortstate[plot]'"
    ]
    assert not (tmp_path / "p.png").exists()


def test_plot_writes_a_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    code, _, err = run_cli(capsys, "bench", DEMO, "--steps", 3, "--rounds", 1, "--plot", tmp_path / "p.png")
    assert code == 0, err
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["missing.xml"], "missing.xml: no such file"),
        ([DEMO.with_suffix(".bin")], f"{DEMO.with_suffix('.bin')}: expected an OpenVINO IR .xml"),
        ([DEMO, "--steps", "0"], "--steps must be at least 1, got 0"),
        ([DEMO, "--threads", "0"], "--threads must be at least 1, got 0"),
        ([LLAMA, "--position", "1"], f"{LLAMA}: the decode position must be at least 2, got 1"),
    ],
)
def test_usage_errors_are_one_line_exit_2(capsys, args, expected):
    code, out, err = run_cli(capsys, "bench", *args)
    assert code == 2 and out == ""
    assert err == f"ortstate: error: {expected}\n"


def test_model_ortstate_cannot_run_is_one_line_exit_1(capsys, monkeypatch):
    def nothing_runs(workload, threads, names):
        return [], {"custom-op": "conversion failed: unsupported operations: Foo-1", "explicit": "same"}

    monkeypatch.setattr(bench, "make_runners", nothing_runs)
    code, out, err = run_cli(capsys, "bench", DEMO, "--steps", 3)
    assert code == 1 and out == ""
    assert err.splitlines()[-1] == (
        f"ortstate: error: {DEMO}: cannot run in ortstate: conversion failed: unsupported operations: Foo-1"
    )


# -- the library ------------------------------------------------------------------------------------
def test_decoder_workload_prefills_then_decodes_one_token_per_step():
    w = bench.model_workload(LLAMA, steps=3, position=10)
    assert [f["input_ids"].shape for f in w.prefill] == [(1, 9), (1, 1)]
    assert [f["attention_mask"].shape[1] for f in w.prefill + w.steps] == [9, 10, 11, 12, 13]
    assert [int(f["position_ids"][0, -1]) for f in w.prefill + w.steps] == [8, 9, 10, 11, 12]
    assert w.steps[0]["beam_idx"].dtype == np.int32 and w.steps[0]["input_ids"].dtype == np.int64
    assert w.ov_config == {"KV_CACHE_PRECISION": "f32"}
    assert bench.max_positions(LLAMA) == 128 and bench.max_positions(DEMO) is None


@pytest.mark.parametrize("xml", [DEMO, KV_TOY], ids=["static-states", "growing-states"])
def test_floor_carries_the_state_like_the_explicit_session(xml):
    """The floor does no state management, but it must compute the same steps."""
    steps = bench.model_workload(xml, steps=6).steps
    model = ortstate.convert(xml, explicit_state=True)
    session = ortstate.StatefulSession(model)
    floor = Floor(model, 1)
    assert floor.mode == ("iobinding" if xml == DEMO else "run")
    for _ in range(2):  # through a reset
        session.reset_state()
        floor.reset()
        for feeds in steps:
            expected = session.run(None, feeds)
            got = floor.step(feeds)
            for a, b in zip(expected, got):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_measure_alternates_rounds_and_resets_each_round():
    calls: list[str] = []

    class Fake:
        def __init__(self, name):
            self.name = name

        def reset(self):
            calls.append(f"{self.name}.reset")

        def step(self, feeds):
            calls.append(f"{self.name}.{'pre' if 'p' in feeds else 'step'}")

    w = bench.Workload("fake", Path("fake.xml"), [{"s": np.zeros(1)}] * 2, prefill=[{"p": np.zeros(1)}])
    result = bench.measure(w, [Fake("floor"), Fake("explicit")], rounds=2, warmup=1)
    timed = calls[calls.index("explicit.step") + 1 :]  # after the warm-up of both
    round_one = ["floor.reset", "floor.pre", "floor.step", "floor.step"]
    round_one += ["explicit.reset", "explicit.pre", "explicit.step", "explicit.step"]
    assert timed == round_one + round_one[4:] + round_one[:4]
    assert [r.name for r in result.runners] == ["explicit", "floor"]  # the LABELS order
    assert all(r.samples_us.size == 4 for r in result.runners)
    assert result.ratio("floor", "floor") == 1.0 and result.ratio("explicit", "openvino") is None

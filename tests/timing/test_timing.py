"""``ortstate bench`` and :mod:`ortstate.timing`: outputs, formats, error paths. Never asserts timings."""

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from oracle import REPO

import ortstate
from ortstate import timing
from ortstate.cli import main
from ortstate.extras import install_hint
from ortstate.timing.runners import Floor

ROOT = REPO
DEMO = ROOT / "ortstate" / "_demo" / "char_lstm.xml"
KV_TOY = ROOT / "models" / "kv_cache_toy" / "model.xml"
ACCUMULATOR = ROOT / "models" / "accumulator" / "model.xml"
LLM = ROOT / "models" / "llm"
LLAMA = LLM / "llama" / "openvino_model.xml"
MAMBA = LLM / "mamba" / "openvino_model.xml"
DYNBATCH = ROOT / "models" / "lstm_2l_dynbatch" / "model.xml"
LABELS = [timing.LABELS[n] for n in timing.RUNNERS]
HEADER = "| runner | p50 µs | p90 µs | p99 µs | × floor | × OpenVINO | × `infer(feeds)` |"


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


def table_rows(out: str) -> dict[str, list[str]]:
    """The printed table's rows by runner label: its cells after the label."""
    rows = [line for line in out.splitlines() if line.startswith("| ") and "runner" not in line and "---" not in line]
    return {r.split(" | ")[0][2:]: [c.strip(" |") for c in r.split(" | ")[1:]] for r in rows}


def test_table_has_every_runner_and_the_ratio_columns(demo_run):
    code, out, err, _ = demo_run
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "_demo/char_lstm.xml: one step per run; weights f32; 20 steps × 2 rounds, 1 thread"
    assert HEADER in lines
    rows = table_rows(out)
    assert list(rows) == LABELS
    assert rows[timing.LABELS["floor"]][3] == "1.00×"  # × floor
    assert rows[timing.LABELS["openvino"]][5] == "1.00×"  # × infer(feeds)
    # the headline × OpenVINO is against OpenVINO's fastest way, whichever it was this time
    p50 = {n: float(rows[timing.LABELS[n]][0]) for n in ("openvino", "openvino-shared")}
    best = min(p50, key=p50.__getitem__)
    assert rows[timing.LABELS[best]][4] == "1.00×"
    assert lines[-1].startswith(
        f"× floor, × OpenVINO: p50 over the floor's and over OpenVINO's fastest way here ({timing.LABELS[best]})"
    )
    assert err == ""  # progress only on a terminal


def test_progress_only_on_a_terminal(capsys, monkeypatch):
    """Through a pipe (CI, a log file) bench prints nothing but its table; on a terminal, its rounds."""
    code, out, err = run_cli(capsys, "bench", DEMO, "--steps", 2, "--rounds", 2, "--no-openvino")
    assert code == 0 and err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    code, out, err = run_cli(capsys, "bench", DEMO, "--steps", 2, "--rounds", 2, "--no-openvino")
    assert code == 0
    assert "ortstate: bench: char_lstm: round 2/2..." in err.splitlines()


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
    assert result["label"] == "_demo/char_lstm.xml" and result["precision"] == "f32"
    assert [r["name"] for r in result["runners"]] == list(timing.RUNNERS)
    for r in result["runners"]:
        assert r["status"] == "ok" and r["label"] == timing.LABELS[r["name"]]
        assert r["samples"] == 40 and len(r["round_p50_us"]) == 2
        for key in ("p50_us", "p90_us", "p99_us", "mean_us", "vs_floor", "vs_openvino", "vs_openvino_infer"):
            assert isinstance(r[key], float) and r[key] > 0
        assert r["p50_us"] <= r["p90_us"] <= r["p99_us"]
    by_name = {r["name"]: r for r in result["runners"]}
    best = min(("openvino", "openvino-shared"), key=lambda n: by_name[n]["p50_us"])
    assert result["openvino_best"] == best and by_name[best]["vs_openvino"] == 1.0
    assert by_name["floor"]["vs_floor"] == 1.0 and by_name["openvino"]["vs_openvino_infer"] == 1.0


def test_no_openvino_leaves_its_rows_out(capsys):
    code, out, err = run_cli(capsys, "bench", DEMO, "--steps", 3, "--rounds", 1, "--no-openvino")
    assert code == 0, err
    assert "OpenVINO `infer" not in out
    assert "| ortstate custom-op form (Python state ops) |" in out
    assert out.splitlines()[-1].endswith("|  |  |")  # no OpenVINO to compare with: the ratio cells are empty


def test_plot_without_matplotlib_fails_before_measuring(capsys, monkeypatch, tmp_path):
    def never(*args, **kwargs):
        raise AssertionError("the benchmark ran")

    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # import matplotlib(.anything) -> ImportError, loaded or not
    monkeypatch.setattr(timing, "make_runners", never)
    code, out, err = run_cli(capsys, "bench", DEMO, "--steps", 3, "--rounds", 1, "--plot", tmp_path / "p.png")
    assert (code, out) == (2, "")
    assert err == f"ortstate: error: --plot: plots need matplotlib: {install_hint('plot')}\n"
    assert not (tmp_path / "p.png").exists()


def test_a_plot_format_matplotlib_does_not_write_fails_before_measuring(capsys, tmp_path):
    target = tmp_path / "p.xyz"
    code, out, err = run_cli(capsys, "bench", DEMO, "--steps", 3, "--rounds", 1, "--plot", target)
    assert (code, out) == (2, "")
    assert err.startswith(f"ortstate: error: --plot: {target}: matplotlib writes no .xyz files (it writes ")
    assert "png" in err and err.count("\n") == 1 and not target.exists()
    with pytest.raises(ortstate.OutputFileError, match=r"matplotlib writes no \.xyz files"):
        timing.plot_results([fake_result("m/model.xml", "f32", 10.0)], target)


def test_plot_writes_a_png(capsys, tmp_path):
    code, _, err = run_cli(capsys, "bench", DEMO, "--steps", 3, "--rounds", 1, "--plot", tmp_path / "p.png")
    assert code == 0, err
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def fake_result(label: str, precision: str, p50_us: float) -> timing.BenchResult:
    runners = [timing.RunnerStats(n, np.full(10, p50_us * (i + 1))) for i, n in enumerate(timing.RUNNERS)]
    return timing.BenchResult("w", f"x/{label}", "one step per run", 1, 10, 1, runners, label, precision)


def test_a_plot_says_model_workload_precision_and_machine():
    fig = timing.plot_figure([fake_result("llama_int4/openvino_model.xml", "int4 + int8", 2000.0)])
    (ax,) = fig.axes
    title = ax.get_title()
    assert title.startswith("llama_int4/openvino_model.xml: one step per run\nweights int4 + int8, ")
    assert timing.machine_info()["cpu"] in title and "1 thread;" in title
    assert ax.get_xlabel().startswith("ms per step")  # 2,000 µs and more read as ms
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert names == [timing.LABELS[n].replace("`", "") for n in timing.RUNNERS]  # no markdown in a plot
    values = [t.get_text() for t in ax.texts]
    assert values == ["2.00", "4.00", "6.00", "8.00", "10.0", "12.0"]  # every bar labelled with its p50


def test_several_results_share_a_plot_with_the_legend_below_the_bars():
    results = [fake_result("a/model.xml", "f32", 10.0), fake_result("b/model.xml", "f16", 20.0)]
    fig = timing.plot_figure(results, "two models")
    (ax,) = fig.axes
    assert ax.get_title().startswith("two models\n") and ax.get_ylabel().startswith("µs per step")
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["a/model.xml\none step per run\nweights f32", "b/model.xml\none step per run\nweights f16"]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [timing.LABELS[n].replace("`", "") for n in timing.RUNNERS]
    assert legend.get_bbox_to_anchor().y1 < ax.get_window_extent().y0  # below the axes, covering no bar


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

    monkeypatch.setattr(timing, "make_runners", nothing_runs)
    code, out, err = run_cli(capsys, "bench", DEMO, "--steps", 3)
    assert code == 1 and out == ""
    assert err.splitlines()[-1] == (
        f"ortstate: error: {DEMO}: cannot run in ortstate: conversion failed: unsupported operations: Foo-1"
    )


@pytest.mark.parametrize("family", ["mamba", "falcon_mamba", "zamba2"])
def test_ssm_llms_get_a_table(capsys, family):
    """SSM decoders take cache_position / a current-token mask: bench feeds them as generate does."""
    code, out, err = run_cli(capsys, "bench", LLM / family / "openvino_model.xml", "--steps", 3, "--rounds", 1)
    assert code == 0, err
    assert out.startswith(f"{family}/openvino_model.xml: one-token decode from position 16; weights f32; ")
    assert list(table_rows(out)) == LABELS and "skipped" not in out


def test_shapes_for_what_dims_of_1_cannot_run(capsys):
    """An image model's pixels: dynamic dims of 1 are too small for its patches; --shape fixes them."""
    xml = LLM / "llava" / "openvino_vision_embeddings_model.xml"
    code, out, err = run_cli(capsys, "bench", xml, "--steps", 2, "--rounds", 1, "--no-openvino")
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"ortstate: error: {xml}: run failed, no variable was changed: ")
    assert err.endswith(
        "; the inputs were pixel_values float32[1,3,1,1]: give fitting shapes with --shape NAME=D0,D1,...\n"
    )
    code, out, err = run_cli(capsys, "bench", xml, "--steps", 2, "--rounds", 1, "--shape", "pixel_values=1,3,16,16")
    assert code == 0, err
    assert list(table_rows(out)) == LABELS
    code, out, err = run_cli(capsys, "bench", xml, "--shape", "pixels=1,3,16,16")
    assert (code, out) == (2, "")
    assert err == f"ortstate: error: {xml}: --shape pixels: unknown input (inputs: pixel_values)\n"


def test_a_model_whose_state_starts_empty(capsys):
    """Its zero state is empty ([2,0,16]): every runner starts it as zeros of batch 1 after each reset."""
    workload = timing.model_workload(DYNBATCH, steps=2)
    assert {n: v.shape for n, v in workload.initial.items()} == {"c_inc_out": (2, 1, 16), "h_inh_out": (2, 1, 16)}
    code, out, err = run_cli(capsys, "bench", DYNBATCH, "--steps", 2, "--rounds", 1)
    assert code == 0, err
    assert list(table_rows(out)) == LABELS and "skipped" not in out


# -- the library ------------------------------------------------------------------------------------
def test_decoder_workload_prefills_then_decodes_one_token_per_step():
    w = timing.model_workload(LLAMA, steps=3, position=10)
    assert [f["input_ids"].shape for f in w.prefill] == [(1, 9), (1, 1)]
    assert [f["attention_mask"].shape[1] for f in w.prefill + w.steps] == [9, 10, 11, 12, 13]
    assert [int(f["position_ids"][0, -1]) for f in w.prefill + w.steps] == [8, 9, 10, 11, 12]
    assert w.steps[0]["beam_idx"].dtype == np.int32 and w.steps[0]["input_ids"].dtype == np.int64
    assert w.ov_config == {"KV_CACHE_PRECISION": "f32"}
    assert (w.model, w.precision) == ("llama/openvino_model.xml", "f32")
    assert timing.max_positions(LLAMA) == 128 and timing.max_positions(DEMO) is None


def test_mamba_workload_follows_its_feeding_rules():
    """cache_position covers the 4-wide convolution window at prefill, then the position; the mask
    covers the current token only (what generate feeds: the graph's ScatterND needs it)."""
    w = timing.model_workload(MAMBA, steps=2, position=10)
    feeds = w.prefill + w.steps
    assert [f["input_ids"].shape for f in feeds] == [(1, 9), (1, 1), (1, 1), (1, 1)]
    assert [f["cache_position"].tolist() for f in feeds] == [[0, 1, 2, 3], [9], [10], [11]]
    assert [f["attention_mask"].shape for f in feeds] == [(1, 9), (1, 1), (1, 1), (1, 1)]


def test_weights_are_named_by_how_the_ir_stores_them():
    from ortstate.ir import read_ir

    expected = {"llama": "f32", "llama_fp16": "f16", "llama_int8": "int8", "llama_int4": "int4 + int8"}
    for name, precision in expected.items():
        assert timing.weight_precision(read_ir(LLM / name / "openvino_model.xml")) == precision
    assert timing.weight_precision(read_ir(ACCUMULATOR)) == "none"
    assert timing.model_label(ACCUMULATOR) == "accumulator/model.xml" and timing.model_label("m.xml") == "m.xml"


@pytest.mark.parametrize(
    ("xml", "binds"),
    [(DEMO, True), (ACCUMULATOR, True), (KV_TOY, False), (MAMBA, True), (LLAMA, False), (DYNBATCH, True)],
)
def test_floor_carries_the_state_like_the_explicit_session(xml, binds):
    """The floor does no state management, but it must compute the same steps; states that keep
    their shapes (declared static or not) go through its pre-bound IOBindings, growing ones do not."""
    workload = timing.model_workload(xml, steps=6)
    model = ortstate.convert(xml, explicit_state=True)
    session = ortstate.StatefulSession(model)
    floor = Floor(model, 1, initial=workload.initial)
    for _ in range(2):  # through a reset
        session.reset_state()
        for name, value in workload.initial.items():  # a state that starts empty: set as bench sets it
            session.query_state()[session.variables.index(name)].state = value
        floor.reset()
        assert not floor.bound
        for feeds in workload.prefill + workload.steps:
            expected = session.run(None, feeds)
            got = [np.array(g) for g in floor.step(feeds)]  # the floor hands back its bound buffers
            for a, b in zip(expected, got):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        assert floor.bound is binds


def test_measure_alternates_rounds_and_resets_each_round():
    calls: list[str] = []

    class Fake:
        def __init__(self, name):
            self.name = name

        def reset(self):
            calls.append(f"{self.name}.reset")

        def step(self, feeds):
            calls.append(f"{self.name}.{'pre' if 'p' in feeds else 'step'}")

    w = timing.Workload("fake", Path("fake.xml"), [{"s": np.zeros(1)}] * 2, prefill=[{"p": np.zeros(1)}])
    result = timing.measure(w, [Fake("floor"), Fake("explicit")], rounds=2, warmup=1)
    timed = calls[calls.index("explicit.step") + 1 :]  # after the warm-up of both
    round_one = ["floor.reset", "floor.pre", "floor.step", "floor.step"]
    round_one += ["explicit.reset", "explicit.pre", "explicit.step", "explicit.step"]
    assert timed == round_one + round_one[4:] + round_one[:4]
    assert [r.name for r in result.runners] == ["explicit", "floor"]  # the LABELS order
    assert all(r.samples_us.size == 4 for r in result.runners)
    assert result.ratio("floor", "floor") == 1.0 and result.ratio("explicit", "openvino") is None


def test_llm_streams_has_both_pool_paths_with_medians_of_alternating_rounds(capsys, tmp_path):
    """``--llm-streams``: one at a time, the ContinuousBatcher through stream() and through
    generate_many, each's ratio to one at a time, tokens compared; --rounds rounds (medians)."""
    out_json = tmp_path / "llm.json"
    argv = ["bench", LLM / "llama", "--llm-streams", "1,3", "--prompt", 4, "--new", 3, "--rounds", 2, "--no-openvino"]
    code, out, err = run_cli(capsys, *argv, "--json", out_json)
    assert code == 0, err
    assert "4 random ids, 3 new greedy tokens, 1 thread, medians of 2 rounds" in out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [(r[0][2:], r[1]) for r in rows] == [
        (n, runner) for n in "13" for runner in ("sequential", "pool", "pool-many")
    ]
    assert all(r[-1] == f"{r[0][2:]}/{r[0][2:]} |" for r in rows)  # every stream's tokens: one at a time's
    many = [r for r in rows if r[1] == "pool-many"]
    assert all(r[3].endswith("×") and r[4] == "— / —" for r in many)  # a ratio; no per-token times
    document = json.loads(out_json.read_text())
    assert document["rounds"] == 2 and {r["runner"] for r in document["rows"]} == {"sequential", "pool", "pool-many"}

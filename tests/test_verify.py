"""``ortstate verify`` and ortstate.verify: passes on the committed models, and can fail."""

from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino import opset6
from openvino.op.util import Variable, VariableInfo
from oracle import save_ir

import ortstate
from ortstate.cli import main
from ortstate.cli.cmd_verify import WIDTH, state_kinds
from ortstate.ir import read_ir
from ortstate.verify import VerifyInputs, compare, verify

MODELS = Path(__file__).resolve().parents[1] / "models"
COMMITTED = ["accumulator", "counter_i64", "kv_cache_toy"]
LLM = MODELS / "llm"


@pytest.mark.parametrize("name", COMMITTED)
def test_verify_passes_on_committed_models(capsys, name):
    code = main(["verify", str(MODELS / name / "model.xml"), "--both", "--steps", "3"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert out.count(": match (max abs error: ") == 2
    assert out.rstrip().endswith("OK: ortstate matches OpenVINO")


def test_verify_result_covers_every_step_output_and_variable():
    result = verify(MODELS / "counter_i64" / "model.xml", steps=2, forms=("custom-op", "explicit"))
    assert result.ok and [f.form for f in result.forms] == ["custom-op", "explicit"]
    for form in result.forms:
        # 2 phases x 2 steps x (outputs count, scaled + variable count)
        assert [(c.phase, c.step, c.kind, c.name) for c in form.checks] == [
            (phase, step, kind, name)
            for phase in (0, 1)
            for step in (1, 2)
            for kind, name in (("output", "count"), ("output", "scaled"), ("state", "count"))
        ]
    assert result.inputs == {"x": ("float32", (2, 3))}


def accumulator_like(tmp_path: Path, name: str, sign: float) -> Path:
    """``acc = acc + sign * x`` with the accumulator's names, inputs and outputs."""
    x = ops.parameter([1, -1], np.float32, name="x")
    info = VariableInfo()
    info.data_shape, info.data_type, info.variable_id = ov.PartialShape([1, -1]), ov.Type.f32, "acc"
    var = Variable(info)
    rv = opset6.read_value(ops.broadcast(ops.constant(np.float32(0)), ops.shape_of(x)), var)
    add = ops.add(rv, ops.multiply(x, ops.constant(np.float32(sign))))
    add.output(0).get_tensor().set_names({"sum"})
    return save_ir(ov.Model([ops.result(add)], [opset6.assign(add, var)], [x], name), tmp_path, name)


def test_verify_fails_on_a_wrong_onnx_ir_pairing(capsys, tmp_path):
    good = accumulator_like(tmp_path, "good", 1.0)
    wrong = tmp_path / "wrong.onnx"
    ortstate.convert(accumulator_like(tmp_path, "wrong", -1.0), wrong)
    assert main(["verify", str(good), "--onnx", str(tmp_path / "good.onnx")]) == 2  # not written yet
    capsys.readouterr()
    ortstate.convert(good, tmp_path / "good.onnx")
    assert main(["verify", str(good), "--onnx", str(tmp_path / "good.onnx")]) == 0
    capsys.readouterr()
    code = main(["verify", str(good), "--onnx", str(wrong)])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    # as written, and as StatefulSession runs it by default
    assert "custom-op form: MISMATCH in 12 of 12 checks, first:" in out
    assert "explicit (rewritten) form: MISMATCH in 12 of 12 checks, first:" in out
    assert "  output 'sum', step 1 before the reset: max abs error " in out
    assert out.rstrip().endswith("MISMATCH: ortstate differs from OpenVINO (see above)")
    assert err == ""


def test_tolerance_matters(capsys, monkeypatch):
    """ortstate fed inputs perturbed by 1e-6: within the default tolerance, not within 0."""
    real_run = ortstate.StatefulSession.run

    def perturbed(self, names, feeds, *args):
        return real_run(self, names, {k: v * np.float32(1 + 1e-6) for k, v in feeds.items()}, *args)

    monkeypatch.setattr(ortstate.StatefulSession, "run", perturbed)
    xml = str(MODELS / "accumulator" / "model.xml")
    assert main(["verify", xml]) == 0
    capsys.readouterr()
    assert main(["verify", xml, "--rtol", "0", "--atol", "0"]) == 1
    out = capsys.readouterr().out
    assert "explicit form: MISMATCH in 12 of 12 checks" in out  # plain verify: the form that runs by default
    assert "custom-op form" not in out
    assert " !" in out  # failing cells are marked in the table


def test_verify_detects_a_state_that_does_not_reset(capsys, monkeypatch):
    monkeypatch.setattr(ortstate.StatefulSession, "reset_state", lambda self: None)
    code = main(["verify", str(MODELS / "counter_i64" / "model.xml"), "--steps", "2"])
    out = capsys.readouterr().out
    assert code == 1
    assert "  output 'count', step 1 after the reset: max abs error 2" in out
    assert "  state 'count', step 1 after the reset: max abs error 2" in out


def test_fixed_inputs_and_shapes(capsys, tmp_path):
    beam = tmp_path / "beam.npy"
    np.save(beam, np.array([1, 0, 1], np.int32))
    xml = str(MODELS / "kv_cache_toy" / "model.xml")
    code = main(["verify", xml, "--shape", "input=3,2,8", "--input", f"beam_idx={beam}", "--steps", "2"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert (
        "inputs: input float32[3,2,8], beam_idx int32[3]\n  seed 0, random, new values every step; fixed: beam_idx\n"
        in out
    )


@pytest.mark.parametrize(
    ("model", "argv", "message"),
    [
        ("kv_cache_toy", ["--shape", "input=2,2"], "input 'input': shape [2, 2] does not fit [?,?,8]"),
        ("kv_cache_toy", ["--input", "nope={npy}"], "--input nope: unknown input 'nope' (inputs: input, beam_idx)"),
        ("kv_cache_toy", ["--shape", "nope=1,2"], "--shape nope: unknown input 'nope' (inputs: input, beam_idx)"),
        ("kv_cache_toy", ["--input", "beam_idx={npy}"], "input 'beam_idx': got float64 values, the model takes int32"),
        # refused before OpenVINO sees it (it would say ParameterMismatch, naming no input)
        ("kv_cache_toy", ["--input", "beam_idx={i32_2d}"], "input 'beam_idx': shape [2, 2] does not fit [?]"),
        (
            "llm/llama",
            ["--shape", "attention_mask=1,3"],
            "--shape attention_mask: the decoder's feeding rules make 'attention_mask' from input_ids: "
            "set the batch and prompt length with --shape input_ids=B,N",
        ),
    ],
)
def test_verify_input_errors(capsys, tmp_path, model, argv, message):
    npy, i32_2d = tmp_path / "v.npy", tmp_path / "i.npy"
    np.save(npy, np.zeros(2))
    np.save(i32_2d, np.zeros((2, 2), np.int32))
    xml = next((MODELS / model).glob("*model.xml"))
    code = main(["verify", str(xml), *[a.format(npy=npy, i32_2d=i32_2d) for a in argv]])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"ortstate: error: {message}\n"


def test_openvino_refusing_the_inputs_names_the_layer_and_its_inputs(capsys):
    """Shapes that fit every Parameter but not each other: OpenVINO refuses them inside the model."""
    xml = MODELS / "kv_cache_toy" / "model.xml"
    code = main(["verify", str(xml), "--shape", "input=2,3,8", "--shape", "beam_idx=3"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith(
        "ortstate: error: OpenVINO cannot run the model on the inputs given (input float32[2,3,8], beam_idx int32[3]) "
        "at layer 'concat_24' (id 26, Concat-1), which reads input(s) beam_idx, input: [CPU] Concat node"
    )
    assert err.endswith("; give inputs that fit with --shape NAME=D0,D1,... or --input NAME=FILE.npy\n")
    assert "Exception from" not in err  # OpenVINO's source frames are left out


@pytest.mark.parametrize("family", ["mamba", "falcon_mamba", "zamba2", "llama", "whisper", "t5", "llava"])
def test_decoders_are_fed_by_generates_rules(capsys, family):
    """The inputs follow each input's role (mask, positions, cache_position as generate feeds them),
    so OpenVINO runs the SSM LLMs it refused random inputs for, and ortstate matches it."""
    xml = next(
        p for p in (LLM / family).glob("openvino_*model.xml") if "encoder" not in p.name and "embeddings" not in p.name
    )
    code = main(["verify", str(xml), "--steps", "2"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "  seed 0, as generate feeds a decoder: a random 4-token prompt, then 1 token per step\n" in out
    assert max(len(line) for line in out.splitlines() if line != f"{xml}:") <= WIDTH  # only a path may be longer


def test_decoder_inputs_per_step():
    xml = LLM / "mamba" / "openvino_model.xml"
    maker = VerifyInputs(read_ir(xml), xml, 2, {"input_ids": (3, 5)}, {})
    steps = maker.phase(np.random.default_rng(0), 3)
    assert [f["input_ids"].shape for f in steps] == [(3, 5), (3, 1), (3, 1)]
    assert [f["attention_mask"].shape for f in steps] == [(3, 5), (3, 1), (3, 1)]  # the current tokens only
    assert [f["cache_position"].tolist() for f in steps] == [[0, 1, 2, 3], [5], [6]]  # the 4-wide window, then
    assert all(0 <= f["input_ids"].min() and f["input_ids"].max() < 256 for f in steps)  # the vocabulary
    assert [f["beam_idx"].tolist() for f in steps] == [[0, 1, 2]] * 3
    llama = LLM / "llama" / "openvino_model.xml"
    steps = VerifyInputs(read_ir(llama), llama, 2, {}, {}).phase(np.random.default_rng(0), 3)
    assert [f["attention_mask"].shape for f in steps] == [(2, 4), (2, 5), (2, 6)]
    assert [f["position_ids"][0].tolist() for f in steps] == [[0, 1, 2, 3], [4], [5]]


def test_llm_tables_fit_100_columns_and_verbose_shows_every_variable(capsys):
    xml = str(LLM / "llama" / "openvino_model.xml")
    assert main(["verify", xml, "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= WIDTH
    assert "  step   logits   key ×2   value ×2\n" in out
    assert "1 step, reset, 1 step;" in out
    assert main(["verify", xml, "--steps", "1", "--verbose"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("  step"))
    names = [f"past_key_values.{i}.{kv}present.{i}.{kv}" for i in (0, 1) for kv in ("key", "value")]
    assert header.split() == ["step", "logits", *[w for n in sorted(names) for w in ("state", n)]]


def test_a_path_longer_than_the_report_gets_a_line_of_its_own(capsys, tmp_path):
    folder = tmp_path / ("a-folder-with-a-long-name-" * 4)
    folder.mkdir()
    for suffix in (".xml", ".bin"):
        (folder / f"model{suffix}").write_bytes((MODELS / "kv_cache_toy" / f"model{suffix}").read_bytes())
    assert main(["verify", str(folder / "model.xml"), "--steps", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{folder / 'model.xml'}:" and len(lines[0]) > WIDTH
    assert lines[1].startswith("  ortstate vs OpenVINO ") and lines[1].endswith(" (CPU, f32)")
    assert max(map(len, lines[1:])) <= WIDTH


def test_state_kinds():
    names = ["a.ssm.1", "a.conv.10", "a.conv.2", "a.ssm.0", "a.conv.1"]
    assert state_kinds(names) == {"conv ×3": ["a.conv.1", "a.conv.2", "a.conv.10"], "ssm ×2": ["a.ssm.0", "a.ssm.1"]}
    assert state_kinds(["h.0", "h.1"]) == {"2 states": ["h.0", "h.1"]}
    assert state_kinds(["past.key.0", "past.key.1", "value"]) == {
        "key ×2": ["past.key.0", "past.key.1"],
        "value": ["value"],
    }
    assert state_kinds(["k.a.0", "k.a.1", "a"]) == {"kind 1": ["a"], "kind 2 ×2": ["k.a.0", "k.a.1"]}  # no telling word


def test_outputs_without_tensor_names(capsys, tmp_path):
    """A Loop made stateful by LowLatency2 whose Result carries no tensor name: OpenVINO gives no
    name to pair by, so outputs are paired by position."""
    from openvino import passes

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 3, 3], np.float32, name="x")
    h0 = ops.parameter([1, 4], np.float32, name="h0")
    xt, h_prev = ops.parameter([1, 1, 3], np.float32), ops.parameter([1, 4], np.float32)
    weights = [ops.constant((rng.standard_normal(s) * 0.3).astype(np.float32)) for s in ((3, 4), (4, 4))]
    step = ops.squeeze(xt, ops.constant(np.array([1], np.int64)))
    h = ops.tanh(ops.add(ops.matmul(step, weights[0], False, False), ops.matmul(h_prev, weights[1], False, False)))
    h_res = ops.result(h)
    body = ov.Model([ops.result(ops.constant(np.array(True))), h_res], [xt, h_prev], "body")
    loop = ops.loop(ops.constant(np.int64(3)), ops.constant(np.array(True)))
    loop.set_function(body)
    loop.set_special_body_ports([-1, 0])
    loop.set_sliced_input(xt, x.output(0), 0, 1, 1, -1, 1)
    loop.set_merged_input(h_prev, h0.output(0), h_res.output(0))
    model = ov.Model([ops.result(loop.get_iter_value(h_res.output(0), -1))], [x, h0], "nameless")
    manager = passes.Manager()
    manager.register_pass(passes.LowLatency2(True))
    manager.run_passes(model)
    saved = save_ir(model, tmp_path, "saved")
    # OpenVINO writes a generated name; an IR from elsewhere may have none
    text = saved.read_text()
    name = ov.Core().read_model(str(saved)).outputs[0].get_any_name()
    xml = tmp_path / "nameless.xml"
    xml.write_text(text.replace(f' names="{name}"', "").replace(f' output_names="{name}"', ""))
    saved.with_suffix(".bin").rename(xml.with_suffix(".bin"))
    assert ov.Core().read_model(str(xml)).outputs[0].get_names() == set()
    code = main(["verify", str(xml), "--both"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert out.count(": match (max abs error: ") == 2


def test_compare():
    f = np.array([1.0, 2.0, np.nan], np.float32)
    assert compare(f, f.copy(), 0, 0) == (0.0, True, "")
    assert compare(f + 1e-3, f, 0, 1e-2)[1] and not compare(f + 1e-3, f, 0, 1e-4)[1]
    assert compare(f[:2], f, 1, 1) == (float("inf"), False, "shape [2], OpenVINO [3]")
    assert compare(f.astype(np.float64), f, 1, 1) == (float("inf"), False, "dtype float64, OpenVINO float32")
    assert compare(np.array([3]), np.array([2]), 1, 1) == (1.0, False, "")  # integers: exact
    assert compare(np.array([np.nan]), np.array([1.0]), 1, 1)[:2] == (float("inf"), False)


def test_variables_that_start_empty_start_as_a_stream_starts_them(capsys):
    """A dynamic-batch LSTM made stateful: its zero state is empty ([2,0,16]) and neither runtime can
    run a first step on it; both start from zeros of the batch, before step 1 and after the reset."""
    code = main(["verify", str(MODELS / "lstm_2l_dynbatch" / "model.xml"), "--both", "--shape", "x=3,2,8"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "variables starting empty set to zeros first: c_inc_out\n  [2,3,16], h_inh_out [2,3,16]" in out
    assert out.count(": match (max abs error: ") == 2

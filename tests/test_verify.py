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
from ortstate.errors import OrtStateError
from ortstate.ir import read_ir
from ortstate.verify import InputSpec, compare, input_specs, random_inputs, verify

MODELS = Path(__file__).resolve().parents[1] / "models"
COMMITTED = ["accumulator", "counter_i64", "kv_cache_toy"]


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
    assert "custom-op form: MISMATCH in 12 of 12 checks" in out
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
    note = "random, seed 0, new values every step; fixed: beam_idx"
    assert f"inputs: input float32[3,2,8], beam_idx int32[3] ({note})" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shape", "input=2,2"], "input 'input': shape [2, 2] does not fit [?,?,8]"),
        (["--input", "nope={npy}"], "unknown input 'nope' (inputs: input, beam_idx)"),
        (["--input", "beam_idx={npy}"], "input 'beam_idx': got float64 values, the model takes int32"),
    ],
)
def test_verify_input_errors(capsys, tmp_path, argv, message):
    npy = tmp_path / "v.npy"
    np.save(npy, np.zeros(2))
    code = main(["verify", str(MODELS / "kv_cache_toy" / "model.xml"), *[a.format(npy=npy) for a in argv]])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"ortstate: error: {message}\n"


def test_random_inputs_follow_the_parameters():
    specs = input_specs(read_ir(MODELS / "kv_cache_toy" / "model.xml"))
    assert specs == [
        InputSpec("input", np.dtype(np.float32), (None, None, 8)),
        InputSpec("beam_idx", np.dtype(np.int32), (None,)),
    ]
    feeds = random_inputs(specs, np.random.default_rng(0), batch=3, shapes={"input": (3, 5, 8)})
    assert feeds["input"].shape == (3, 5, 8) and feeds["input"].dtype == np.float32
    assert feeds["beam_idx"].shape == (3,) and feeds["beam_idx"].dtype == np.int32
    assert set(feeds["beam_idx"].tolist()) <= {0, 1, 2}
    flags = random_inputs([InputSpec("m", np.dtype(bool), (2, 64))], np.random.default_rng(0))["m"]
    assert flags.dtype == np.bool_ and flags.any() and not flags.all()
    with pytest.raises(OrtStateError, match=r"input 'r' has a dynamic rank: give a shape \(--shape r=D0,D1,...\)"):
        random_inputs([InputSpec("r", np.dtype(np.float32), None)], np.random.default_rng(0))


def test_compare():
    f = np.array([1.0, 2.0, np.nan], np.float32)
    assert compare(f, f.copy(), 0, 0) == (0.0, True, "")
    assert compare(f + 1e-3, f, 0, 1e-2)[1] and not compare(f + 1e-3, f, 0, 1e-4)[1]
    assert compare(f[:2], f, 1, 1) == (float("inf"), False, "shape [2], OpenVINO [3]")
    assert compare(f.astype(np.float64), f, 1, 1) == (float("inf"), False, "dtype float64, OpenVINO float32")
    assert compare(np.array([3]), np.array([2]), 1, 1) == (1.0, False, "")  # integers: exact
    assert compare(np.array([np.nan]), np.array([1.0]), 1, 1)[:2] == (float("inf"), False)

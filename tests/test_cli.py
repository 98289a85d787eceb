"""The ``ortstate`` command line: every subcommand's success path and its one-line errors."""

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino import opset6
from openvino.op.util import Variable, VariableInfo
from oracle import save_ir

import ortstate
from ortstate.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
ACCUMULATOR = MODELS / "accumulator" / "model.xml"
COUNTER = MODELS / "counter_i64" / "model.xml"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, expected: str) -> None:
    assert "Traceback" not in err
    assert err == f"ortstate: error: {expected}\n"


@pytest.fixture
def acc_copy(tmp_path):
    """The committed accumulator IR copied to tmp_path (convert writes beside its input)."""
    for suffix in (".xml", ".bin"):
        shutil.copy(ACCUMULATOR.with_suffix(suffix), tmp_path / f"acc{suffix}")
    return tmp_path / "acc.xml"


def save_npy(path: Path, value) -> Path:
    np.save(path, np.asarray(value))
    return path


# -- help, version --------------------------------------------------------------------------------
def test_help_as_a_subprocess():
    proc = subprocess.run([sys.executable, "-m", "ortstate", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "examples:" in proc.stdout and "exit codes:" in proc.stdout
    for name in ("convert", "inspect", "run", "verify"):
        assert f"ortstate {name} " in proc.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_subcommand_help_has_examples(capsys, name):
    code, out, _ = run_cli(capsys, name, "--help")
    assert code == 0
    assert "examples:" in out and f"ortstate {name} " in out.split("examples:")[1]


def test_version(capsys):
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0
    assert out.startswith(f"ortstate {ortstate.__version__} (onnxruntime ")


# -- convert ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("explicit", "name", "form"), [(False, "acc.onnx", "custom-op"), (True, "acc.explicit.onnx", "explicit")]
)
def test_convert_writes_beside_the_input(capsys, acc_copy, explicit, name, form):
    code, out, err = run_cli(capsys, "convert", acc_copy, *(["--explicit-state"] if explicit else []))
    assert code == 0, err
    target = acc_copy.parent / name
    assert out.startswith(f"{acc_copy} -> {target}: 6 IR ops -> ")
    assert f", 1 variable (acc), {form} form, " in out and out.endswith(" s\n") and out.count("\n") == 1
    session = ortstate.StatefulSession(target)
    x = np.ones((1, 3), np.float32)
    session.run(None, {"x": x})
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], 2 * x)


def test_convert_output_and_bin_options(capsys, tmp_path, acc_copy):
    weights = tmp_path / "weights" / "other.bin"
    weights.parent.mkdir()
    acc_copy.with_suffix(".bin").rename(weights)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, out, err = run_cli(capsys, "convert", acc_copy, "--bin", weights, "-o", out_dir / "x.onnx")
    assert code == 0, err
    assert (out_dir / "x.onnx").is_file()
    code, _, err = run_cli(capsys, "convert", acc_copy, "--bin", weights, "-o", out_dir)  # a directory
    assert code == 0, err
    assert (out_dir / "acc.onnx").is_file()


# -- inspect ----------------------------------------------------------------------------------------
def test_inspect_ir(capsys):
    code, out, _ = run_cli(capsys, "inspect", COUNTER)
    assert code == 0
    assert "OpenVINO IR v11 'counter_i64'" in out
    assert "  x     float32  [?,3]" in out
    assert "  count   int64    [1]" in out
    assert "  count  i64   [1]    zeros" in out
    assert "  ReadValue-6  1" in out
    assert out.rstrip().endswith("unsupported ops: none")


def test_inspect_onnx_explicit(capsys, tmp_path):
    path = tmp_path / "counter.onnx"
    ortstate.convert(COUNTER, path, explicit_state=True)
    code, out, _ = run_cli(capsys, "inspect", path)
    assert code == 0
    assert "ortstate explicit form of model.xml" in out
    assert "ortstate.in.count -> ortstate.out.count" in out
    assert "  scaled  float32  [?,3]" in out
    assert "ortstate.in.count " not in out.split("variables")[0]  # state plumbing is not a user input


def einsum_ir(tmp_path: Path) -> Path:
    """An IR with an op ortstate has no translator for (Einsum-7)."""
    a = ops.parameter([2, 3], np.float32, name="a")
    b = ops.parameter([3, 4], np.float32, name="b")
    op = ops.einsum([a, b], "ij,jk->ik")
    op.set_friendly_name("einsum")
    return save_ir(ov.Model([ops.result(op)], [a, b], "einsum"), tmp_path, "einsum")


def test_inspect_lists_unsupported_ops_without_failing(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "inspect", einsum_ir(tmp_path))
    assert code == 0
    assert "unsupported ops (ortstate cannot convert this model yet)" in out
    assert "  Einsum-7  1       'einsum' id 2" in out


# -- run ------------------------------------------------------------------------------------------
def test_run_ir_steps_and_output_dir(capsys, tmp_path):
    x = save_npy(tmp_path / "x.npy", np.array([[1.0, 2.0, 3.0]], np.float32))
    code, out, err = run_cli(capsys, "run", ACCUMULATOR, "--input", f"x={x}", "--steps", 3, "-o", tmp_path / "o")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["step", "output", "dtype", "shape", "min", "max", "mean", "ms"]
    assert lines[3].split()[:7] == ["3", "sum", "float32", "[1,3]", "3", "9", "6"]
    assert "variables after step 3" in out and "3 steps, explicit form, " in out
    assert out.rstrip().endswith(f"saved 3 output files to {tmp_path / 'o'}")
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "step3_sum.npy"), [[3.0, 6.0, 9.0]])


def test_run_onnx_per_step(capsys, tmp_path):
    path = tmp_path / "acc.onnx"
    ortstate.convert(ACCUMULATOR, path)
    frames = np.arange(6, dtype=np.float32).reshape(3, 1, 2)  # [steps, 1, 2]
    x = save_npy(tmp_path / "frames.npy", frames)
    code, out, err = run_cli(capsys, "run", path, "-i", f"x={x}", "-n", 3, "--per-step", "-o", tmp_path / "o")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "step3_sum.npy"), frames.sum(0))


@pytest.mark.parametrize(("form", "runs"), [("auto", "explicit"), ("custom-op", "custom-op"), ("explicit", "explicit")])
def test_run_forms(capsys, tmp_path, form, runs):
    x = save_npy(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    code, out, err = run_cli(capsys, "run", COUNTER, "--input", f"x={x}", "--steps", 2, "--form", form)
    assert code == 0, err
    assert f"2 steps, {runs} form, " in out
    assert "count   int64    [1]    2    2    2" in out


REWRITTEN_RUN = "explicit form (a custom-op model, rewritten)"


@pytest.mark.parametrize(
    ("form", "says"), [("auto", REWRITTEN_RUN), ("custom-op", "custom-op form"), ("explicit", REWRITTEN_RUN)]
)
def test_run_a_custom_op_onnx_in_each_form(capsys, tmp_path, form, says):
    model = tmp_path / "counter.onnx"
    ortstate.convert(COUNTER, model)
    x = save_npy(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    code, out, err = run_cli(capsys, "run", model, "--input", f"x={x}", "--steps", 2, "--form", form)
    assert code == 0, err
    assert f"2 steps, {says}, " in out
    assert "count   int64    [1]    2    2    2" in out


# -- errors: one line, pinned ---------------------------------------------------------------------
def test_missing_model_file(capsys, tmp_path):
    code, _, err = run_cli(capsys, "convert", tmp_path / "nope.xml")
    assert code == 2
    assert_one_line_error(err, f"{tmp_path / 'nope.xml'}: no such file")


def test_bad_input_syntax(capsys):
    code, _, err = run_cli(capsys, "run", ACCUMULATOR, "--input", "x.npy")
    assert code == 2
    assert_one_line_error(err, "--input expects NAME=VALUE, e.g. --input x=x.npy; got 'x.npy'")


def test_missing_and_bad_npy(capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", ACCUMULATOR, "--input", f"x={tmp_path / 'x.npy'}")
    assert code == 2
    assert_one_line_error(err, f"{tmp_path / 'x.npy'}: no such file")
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not numpy")
    code, _, err = run_cli(capsys, "run", ACCUMULATOR, "--input", f"x={bad}")
    assert code == 2
    assert_one_line_error(err, f"{bad}: input 'x': not a readable .npy file (not in .npy format)")


def test_run_input_mismatches(capsys, tmp_path):
    wrong_type = save_npy(tmp_path / "i.npy", np.ones((1, 3), np.int64))
    code, _, err = run_cli(capsys, "run", ACCUMULATOR, "--input", f"x={wrong_type}")
    assert code == 2
    assert_one_line_error(err, "input 'x': the file holds int64 values, the model takes float32")
    wrong_shape = save_npy(tmp_path / "s.npy", np.ones((2, 3), np.float32))
    code, _, err = run_cli(capsys, "run", ACCUMULATOR, "--input", f"x={wrong_shape}")
    assert code == 2
    assert_one_line_error(err, "input 'x': shape [2, 3] does not fit the model's [1,?]")
    code, _, err = run_cli(capsys, "run", ACCUMULATOR)
    assert code == 2
    assert_one_line_error(err, "missing --input for x (the model takes: x tensor(float) [1,?])")


def test_unsupported_op_ir(capsys, tmp_path):
    xml = einsum_ir(tmp_path)
    code, _, err = run_cli(capsys, "convert", xml)
    assert code == 1
    assert_one_line_error(err, f"{xml}: unsupported operations: Einsum-7 ('einsum' id 2)")


def test_model_that_fails_to_convert(capsys, tmp_path):
    """A ReadValue whose variable is never assigned: a StateError, exit 1."""
    x = ops.parameter([1, 2], np.float32, name="x")
    info = VariableInfo()
    info.data_shape, info.data_type, info.variable_id = ov.PartialShape([1, 2]), ov.Type.f32, "v"
    read = opset6.read_value(x, Variable(info))
    read.set_friendly_name("read")
    xml = save_ir(ov.Model([ops.result(ops.add(read, x))], [x], "orphan"), tmp_path, "orphan")
    feed = save_npy(tmp_path / "x.npy", np.ones((1, 2), np.float32))
    code, _, err = run_cli(capsys, "run", xml, "--input", f"x={feed}")
    assert code == 1
    where = f"{xml}: layer 'read' (id 1, ReadValue-6)"
    assert_one_line_error(err, f"{where}: variable 'v' is read but never assigned (no Assign)")


def test_malformed_ir(capsys, tmp_path):
    xml = tmp_path / "broken.xml"
    xml.write_text("<net name='x' version='11'><layers>")
    code, _, err = run_cli(capsys, "inspect", xml)
    assert code == 1
    assert err.startswith(f"ortstate: error: {xml}: malformed XML: ") and err.count("\n") == 1


def test_usage_errors_are_one_line(capsys):
    code, _, err = run_cli(capsys)
    assert code == 2
    assert_one_line_error(
        err, "no command given; commands: demo, convert, inspect, run, generate, verify, bench (see 'ortstate --help')"
    )
    code, _, err = run_cli(capsys, "convert")
    assert code == 2
    assert_one_line_error(err, "the following arguments are required: MODEL.xml (see 'ortstate convert --help')")


def test_unexpected_exception_is_one_line(capsys, monkeypatch):
    def boom(args):
        raise RuntimeError("kaboom\nsecond line")

    monkeypatch.setitem(COMMANDS, "inspect", dataclasses.replace(COMMANDS["inspect"], run=boom))
    monkeypatch.delenv("ORTSTATE_TRACEBACK", raising=False)
    code, _, err = run_cli(capsys, "inspect", ACCUMULATOR)
    assert code == 1
    hint = "(set ORTSTATE_TRACEBACK=1 to see where)"
    assert_one_line_error(err, f"internal error: RuntimeError: kaboom second line {hint}")


def test_verify_without_openvino(capsys, monkeypatch):
    import ortstate.verify as verify_module

    real = verify_module.importlib.import_module

    def no_openvino(name, *args):
        if name == "openvino":
            raise ImportError("No module named 'openvino'")
        return real(name, *args)

    monkeypatch.setattr(verify_module.importlib, "import_module", no_openvino)
    code, out, err = run_cli(capsys, "verify", ACCUMULATOR)
    assert code == 2
    assert_one_line_error(err, "verify needs OpenVINO, which is not installed: pip install 'ortstate[verify]'")

"""The ``ortstate`` command line: every subcommand's success path and its one-line errors."""

import dataclasses
import re
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
from oracle import REPO, assert_one_line_error, linked_copy, run_cli, save_ir

import ortstate
from ortstate.cli import COMMANDS
from ortstate.cli.cmd_inspect import _versions
from ortstate.extras import install_hint

ROOT = REPO
MODELS = ROOT / "models"
ACCUMULATOR = MODELS / "accumulator" / "model.xml"
COUNTER = MODELS / "counter_i64" / "model.xml"


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


def test_inspect_explicit_lists_every_name_needed_to_drive_it_by_hand(capsys, tmp_path):
    """A variable with a computed initial value has an init flag input: it is listed too."""
    path = tmp_path / "acc.explicit.onnx"
    ortstate.convert(ACCUMULATOR, path, explicit_state=True)
    code, out, _ = run_cli(capsys, "inspect", path)
    assert code == 0
    variables = out.split("\nvariables\n")[1].split("\n\n")[0].splitlines()
    assert variables[0].split() == [
        "id",
        "type",
        "shape",
        "init",
        "graph",
        "input",
        "->",
        "output",
        "init",
        "flag",
        "input",
    ]
    assert variables[1].split() == [
        "acc",
        "f32",
        "[1,?]",
        "computed",
        "ortstate.in.acc",
        "->",
        "ortstate.out.acc",
        "ortstate.init.acc",
    ]


def test_every_command_lists_variables_in_one_order(capsys, tmp_path):
    """By name, numbers read as numbers: mamba's file order is ssm.1, conv.0, ssm.0, conv.1."""
    xml = MODELS / "llm" / "mamba" / "openvino_model.xml"
    ids = [f"cache_params.past.{k}.{i}cache_params.present.{k}.{i}" for k in ("conv", "ssm") for i in (0, 1)]
    code, out, _ = run_cli(capsys, "inspect", xml)
    listed = [line.split()[:3] for line in out.split("\nvariables\n")[1].split("\n\n")[0].splitlines()[1:]]
    assert (
        code == 0 and ["".join((past, present)) for past, _, present in listed] == ids
    )  # shown split: past -> present
    code, out, _ = run_cli(capsys, "convert", xml, "-o", tmp_path)
    assert code == 0 and f"4 variables ({', '.join(ids)})" in out
    code, out, _ = run_cli(capsys, "verify", xml, "--steps", 1, "--verbose")
    header = next(line for line in out.splitlines() if line.startswith("  step"))
    assert code == 0 and header.split()[2:] == [w for i in ids for w in ("state", i)]


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
    assert "  Einsum-7  1       none       'einsum' id 2" in out


def test_inspect_names_the_versions_of_an_unsupported_op_type_that_convert(capsys, tmp_path):
    """An op type converted from a later version than the model's (LSTMSequence: 5 on)."""
    xml = linked_copy(MODELS / "lstm_1l", tmp_path / "lstm_1l", skip=("model.xml",)) / "model.xml"
    xml.write_text(
        (MODELS / "lstm_1l" / "model.xml")
        .read_text()
        .replace('type="LSTMSequence" version="opset5"', 'type="LSTMSequence" version="opset1"')
    )
    code, out, _ = run_cli(capsys, "inspect", xml)
    assert code == 0
    unsupported = out.split("unsupported ops (ortstate cannot convert this model yet)")[1].splitlines()
    assert unsupported[1].split() == ["op", "layers", "converted", "where"]
    assert unsupported[2].split()[:3] == ["LSTMSequence-1", "1", "5+"]
    assert [_versions(v) for v in ([1, 7, 8], [2, 7], None)] == ["1-6, 7, 8+", "2-6, 7+", "none"]


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


GUESSED_MASK = (
    "model type unknown: attention_mask assumed to cover past and current tokens (mamba-family models, "
    "falcon_mamba, mamba, zamba2, need config.json's model_type)"
)
REMEDY = (
    "the model type is unknown, so how attention_mask is fed was guessed: put the model's config.json beside the IR"
)


@pytest.mark.parametrize("command", ["generate", "bench", "verify"])
def test_a_decoder_fed_by_a_guess_says_so_and_what_would_help(capsys, tmp_path, command):
    """zamba2 without config.json: nothing in its graph tells its mask rule (the mamba family's) from a
    transformer's. Every command feeding it says what it guessed, and its failure what would help
    (not --shape, which cannot change a decoder's feeds)."""
    folder = linked_copy(MODELS / "llm" / "zamba2", tmp_path / "z", skip=("config.json", "generation_config.json"))
    xml = folder / "openvino_model.xml"
    argv = {
        "generate": ["generate", folder, "--prompt-ids", "8,79,106", "-n", 4, "--ignore-eos"],
        "bench": ["bench", xml, "--steps", 2, "--rounds", 1, "--no-openvino"],
        "verify": ["verify", xml],
    }[command]
    code, out, err = run_cli(capsys, *argv)
    note, error = err.splitlines()
    assert note == f"ortstate: note: {folder if command == 'generate' else xml}: {GUESSED_MASK}"
    inputs = {
        "generate": "",
        "bench": "; the inputs were input_ids int64[1,15], attention_mask int64[1,15], beam_idx int32[1]:",
        "verify": ";",
    }[command]
    head = {
        "generate": "run failed, no variable was changed: ",
        "bench": f"{xml}: run failed, no variable was changed: ",
        "verify": "OpenVINO cannot run the model on the inputs given (input_ids int64[2,1], attention_mask "
        "int64[2,5], beam_idx int32[2]) at layer '__module.model/aten::copy_/Broadcast' (id 698, Broadcast-3), "
        "which reads input(s) attention_mask, beam_idx, input_ids: ",
    }[command]
    # the middle is ONNX Runtime's or OpenVINO's own reason
    assert re.fullmatch(rf"ortstate: error: {re.escape(head)}.+{re.escape(inputs or ';')} {re.escape(REMEDY)}", error)
    assert code == 1 and "--shape" not in error


@pytest.mark.parametrize("command", ["bench", "verify"])
def test_a_decoder_whose_graph_settles_the_guess_runs_and_says_what_it_read(capsys, tmp_path, command):
    """mamba without config.json: cache_position indexes a convolution window in its graph, which marks
    a mamba-style model; the commands say so and run."""
    folder = linked_copy(MODELS / "llm" / "mamba", tmp_path / "m", skip=("config.json", "generation_config.json"))
    xml = folder / "openvino_model.xml"
    argv = ["bench", xml, "--steps", 2, "--rounds", 1, "--no-openvino"] if command == "bench" else ["verify", xml]
    code, out, err = run_cli(capsys, *argv)
    assert (code, err.splitlines()) == (
        0,
        [
            f"ortstate: note: {xml}: cache_position indexes a 4-wide convolution state in the graph (config.json "
            "gives none); model type unknown: attention_mask covers the current tokens, as mamba models take it"
        ],
    )


def test_one_exit_code_rule(capsys, tmp_path):
    """2: the command line (options, files missing or unopenable, an IR's .bin included, inputs that
    don't fit); 1: the model (malformed files included) could not be converted, loaded or run."""
    shutil.copy(COUNTER, tmp_path / "counter.xml")  # counter_i64 has weights: its .bin is needed
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a protobuf at all")
    x = save_npy(tmp_path / "x.npy", np.ones((1, 3), np.float32))
    wrong = save_npy(tmp_path / "wrong.npy", np.ones((1, 3, 1), np.float32))
    no_bin = f"{tmp_path / 'counter.xml'}: weights file {tmp_path / 'counter.bin'} not found"
    cases = [
        (["convert", tmp_path / "counter.xml"], 2, no_bin),
        (["inspect", tmp_path / "counter.xml"], 2, no_bin),
        (["run", tmp_path / "counter.xml", "--input", f"x={x}"], 2, no_bin),
        (["verify", tmp_path / "counter.xml"], 2, no_bin),
        (["bench", tmp_path / "counter.xml"], 2, no_bin),
        (["inspect", garbage], 1, f"{garbage}: not an ONNX model (nor an IR .xml): "),
        (["run", garbage, "--input", f"x={x}"], 1, f"{garbage}: not a readable ONNX model: "),
        (["verify", ACCUMULATOR, "--onnx", garbage], 1, f"{garbage}: not an ONNX model: "),
        (["verify", ACCUMULATOR, "--input", f"x={wrong}"], 2, "input 'x': shape [1, 3, 1] does not fit [1,?]"),
        (["run", ACCUMULATOR, "--input", f"x={wrong}"], 2, "input 'x': shape [1, 3, 1] does not fit the model's [1,?]"),
        (["run", ACCUMULATOR], 2, "missing --input for x (the model takes: x tensor(float) [1,?])"),
        (["inspect", tmp_path / "nope.onnx"], 2, f"{tmp_path / 'nope.onnx'}: no such file"),
        (["generate", tmp_path / "nope"], 2, f"{tmp_path / 'nope'}: no such directory"),
        (
            ["bench", ACCUMULATOR, "--json", tmp_path / "no" / "b.json"],
            2,
            f"--json {tmp_path / 'no' / 'b.json'}: cannot be written (No such file or directory)",
        ),
        (["verify", ACCUMULATOR, "--steps", "x"], 2, "argument --steps/-n: invalid int value: 'x'"),
    ]
    for argv, code, message in cases:
        got, out, err = run_cli(capsys, *argv)
        assert (got, out) == (code, ""), (argv, err)
        assert err.startswith(f"ortstate: error: {message}") and err.count("\n") == 1, (argv, err)


def test_help_shows_every_default(capsys):
    """An option with a default says it in its --help line (flags and choices' help say theirs in words)."""
    import argparse

    from ortstate.cli import build_parser

    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in subparsers.choices.items():
        for action in parser._actions:
            if action.default in (None, False, argparse.SUPPRESS) or action.dest == "help":
                continue
            assert "default" in (action.help or ""), f"ortstate {name} {action.option_strings}: no default in its help"


def cli_doc() -> str:
    return (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_cli_doc_synopsis_lists_every_option():
    import argparse

    from ortstate.cli import build_parser

    summary = cli_doc().split("## Synopsis")[1].split("```text\n")[1].split("```")[0]
    blocks = re.split(r"\n(?=ortstate )", summary)
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in subparsers.choices.items():
        (block,) = [b for b in blocks if b.startswith(f"ortstate {name} ")]
        for action in parser._actions:
            if action.option_strings and action.dest != "help":
                assert any(o in block for o in action.option_strings), (
                    f"docs/cli.md: ortstate {name} lacks {action.option_strings}"
                )


def test_cli_doc_examples_run_verbatim_and_write_only_into_out(tmp_path):
    """Each example line of docs/cli.md, run in a copy of the checkout's layout: all succeed, and
    nothing but out/ appears."""
    block = cli_doc().split("```bash\nmkdir -p out\n")[1].split("```")[0]
    (tmp_path / "models").symlink_to(MODELS)
    script = "set -e\nmkdir -p out\n" + block.replace("ortstate ", f"{sys.executable} -m ortstate ")
    script = script.replace('python -c "', f'{sys.executable} -c "')
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "out"]
    assert {"model.onnx", "model.explicit.onnx", "step3_sum.npy", "lstm_1l.png"} <= {
        p.name for p in (tmp_path / "out").iterdir()
    }


def test_npz_inputs(capsys, tmp_path):
    one, several = tmp_path / "one.npz", tmp_path / "several.npz"
    np.savez(one, np.ones((1, 3), np.float32))
    np.savez(several, a=np.ones(1), b=np.ones(1))
    code, out, err = run_cli(capsys, "run", ACCUMULATOR, "--input", f"x={one}")
    assert code == 0, err
    code, _, err = run_cli(capsys, "run", ACCUMULATOR, "--input", f"x={several}")
    assert code == 2
    message = f"{several}: an .npz holding 2 arrays (a, b); input 'x' needs one array (numpy.save, or an .npz of one)"
    assert_one_line_error(err, message)


def test_one_step_is_singular(capsys, tmp_path):
    x = save_npy(tmp_path / "x.npy", np.ones((1, 3), np.float32))
    code, out, _ = run_cli(capsys, "run", ACCUMULATOR, "--input", f"x={x}", "--steps", 1, "-o", tmp_path / "o")
    assert code == 0 and "\n1 step, explicit form, " in out and "saved 1 output file to " in out
    code, out, _ = run_cli(capsys, "verify", ACCUMULATOR, "--steps", 1)
    assert code == 0 and "\n1 step, reset, 1 step; tolerance" in out
    code, out, _ = run_cli(capsys, "bench", ACCUMULATOR, "--steps", 1, "--rounds", 1, "--no-openvino")
    assert code == 0 and out.startswith(
        "accumulator/model.xml: one step per run; weights none; 1 step × 1 round, 1 thread"
    )


def test_verbose_lets_onnxruntime_log_through_for_the_command_only(capsys, monkeypatch):
    from ortstate.runtime import options

    seen = []

    def record(args):
        seen.append(options.log_severity())
        return 0

    monkeypatch.setitem(COMMANDS, "run", dataclasses.replace(COMMANDS["run"], run=record))
    assert run_cli(capsys, "run", ACCUMULATOR)[0] == 0
    assert run_cli(capsys, "run", ACCUMULATOR, "--verbose")[0] == 0
    assert seen == [4, 2] and options.log_severity() == 4


FAILING_RUN = """
import numpy as np, ortstate
from ortstate.runtime import options
session = ortstate.StatefulSession("{xml}")
session.run(None, {{"x": np.ones((1, 3), np.float32)}})
if {verbose}:
    options.set_log_severity(2)
    session = ortstate.StatefulSession("{xml}")
    session.run(None, {{"x": np.ones((1, 3), np.float32)}})
try:
    session.run(None, {{"x": np.ones((1, 4), np.float32)}})  # acc is [1, 3]: Add cannot broadcast
except ortstate.RunError as exc:
    print(exc)
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_onnxruntime_log_is_quiet_unless_asked(verbose):
    """ONNX Runtime writes its own log from C++ (not through sys.stderr): a subprocess sees it."""
    script = FAILING_RUN.format(xml=ACCUMULATOR, verbose=verbose)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    message = proc.stdout.strip()
    assert message.startswith("run failed, no variable was changed: ") and "\n" not in message
    assert ("[E:onnxruntime:" in proc.stderr) is verbose
    if not verbose:
        assert proc.stderr == ""


def test_the_cli_shows_no_onnxruntime_log_line(tmp_path):
    x = ops.parameter([-1], np.float32, name="x")
    shape = ops.parameter([1], np.int64, name="shape")
    xml = save_ir(ov.Model([ops.result(ops.reshape(x, shape, False))], [x, shape], "reshape"), tmp_path, "reshape")
    feeds = [f"x={save_npy(tmp_path / 'x.npy', np.ones(6, np.float32))}", f"shape={save_npy(tmp_path / 's.npy', [4])}"]
    argv = [sys.executable, "-m", "ortstate", "run", xml, "--input", feeds[0], "--input", feeds[1]]
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("ortstate: error: run failed, no variable was changed: ")
    assert proc.stderr.count("\n") == 1
    assert "Input shape:{6}, requested shape:{4}" in proc.stderr  # the reason, from past the first line


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
        err,
        "no command given; commands: demo, convert, inspect, run, generate, export, verify, bench, serve "
        "(see 'ortstate --help')",
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
    import ortstate.verify.run as verify_module

    real = verify_module.importlib.import_module

    def no_openvino(name, *args):
        if name == "openvino":
            raise ImportError("No module named 'openvino'")
        return real(name, *args)

    monkeypatch.setattr(verify_module.importlib, "import_module", no_openvino)
    code, out, err = run_cli(capsys, "verify", ACCUMULATOR)
    assert code == 2
    assert_one_line_error(err, f"verify needs OpenVINO, which is not installed: {install_hint('verify')}")

"""Where a model is expected: a missing file is an ``IRFileError`` from every entry point (convert,
StatefulSession, StreamPool; the CLI says it in one line), and a folder names its model when it
holds one (or optimum-intel's ``openvino_model.xml``), else the error lists what to give."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from oracle import REPO, assert_one_line_error, run_cli

import ortstate
from ortstate.errors import IRFileError

ACCUMULATOR = REPO / "models" / "accumulator"
ENTRY_POINTS = {
    "convert": lambda path, tmp: ortstate.convert(path, tmp / "out.onnx"),
    "StatefulSession": lambda path, tmp: ortstate.StatefulSession(path),
    "StreamPool": lambda path, tmp: ortstate.StreamPool(path, slots=2),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_missing_model_is_an_ir_file_error_everywhere(entry, tmp_path):
    with pytest.raises(IRFileError, match=rf"^{tmp_path / 'nope.xml'}: no such file$"):
        ENTRY_POINTS[entry](tmp_path / "nope.xml", tmp_path)


def test_a_folder_names_its_one_model(tmp_path):
    """What a folder gives is what its one model file gives: the same ONNX, the same steps."""
    ortstate.convert(ACCUMULATOR, tmp_path / "folder.onnx")
    ortstate.convert(ACCUMULATOR / "model.xml", tmp_path / "file.onnx")
    assert (tmp_path / "folder.onnx").read_bytes() == (tmp_path / "file.onnx").read_bytes()
    sessions = [ortstate.StatefulSession(p) for p in (ACCUMULATOR, ACCUMULATOR / "model.xml")]
    name = sessions[0].get_inputs()[0].name
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    steps = [[s.run(None, {name: x})[0] for _ in range(2)] for s in sessions]
    np.testing.assert_array_equal(steps[0], steps[1])
    lstm = REPO / "models" / "lstm_2l_dynbatch"
    pools = [ortstate.StreamPool(p, slots=2) for p in (lstm, lstm / "model.xml")]
    fed = {"x": np.ones((1, 1, 8), np.float32)}
    outs = [pool.step({pool.open(): fed}) for pool in pools]
    np.testing.assert_array_equal(outs[0][0]["y"], outs[1][0]["y"])


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_folder_of_several_models_lists_them(entry, tmp_path):
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("a", "b"):
        shutil.copy(ACCUMULATOR / "model.xml", folder / f"{name}.xml")
        shutil.copy(ACCUMULATOR / "model.bin", folder / f"{name}.bin")
    with pytest.raises(IRFileError, match=rf"^{folder}: a folder with 2 models; give one of them: {folder}/a.xml, "):
        ENTRY_POINTS[entry](folder, tmp_path)
    (folder / "a.xml").unlink()
    (folder / "b.xml").unlink()
    with pytest.raises(IRFileError, match=rf"^{folder}: a folder with no model in it"):
        ENTRY_POINTS[entry](folder, tmp_path)


@pytest.mark.parametrize("command", ["convert", "inspect", "run", "verify"])
def test_the_cli_takes_a_folder_and_names_a_missing_file(command, capsys, tmp_path):
    code, _, err = run_cli(capsys, command, str(tmp_path / "nope.xml"))
    assert code == 2
    assert_one_line_error(err, f"{tmp_path / 'nope.xml'}: no such file")
    code, out, err = run_cli(capsys, "inspect", str(ACCUMULATOR))
    assert code == 0 and "acc" in out, err

"""Variable ids in messages and ``inspect``: an id OpenVINO's ``MakeStateful`` glued from the input
and output it replaced (``past_key_values.1.valuepresent.1.value``) is printed split, where the IR
itself says the split is (the name its ReadValue's output still carries)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from oracle import REPO, run_cli

import ortstate
from ortstate.errors import StateError
from ortstate.meta import shown_id, split_id

IRS = sorted([*REPO.glob("models/**/*.xml"), *(REPO / "ortstate" / "_demo").glob("*.xml")])


def _read_values(xml) -> list[tuple[str, list[str]]]:
    """``(variable_id, names of its ReadValue's output)`` for each ReadValue of an IR."""
    found = []
    for layer in ET.parse(xml).iter("layer"):
        if layer.get("type") == "ReadValue":
            port = layer.find("output/port")
            names = (port.get("names") or "") if port is not None else ""
            found.append((layer.find("data").get("variable_id"), [n for n in names.split(",") if n]))
    return found


def test_every_committed_ir_s_ids_split_where_the_ir_says():
    split = whole = 0
    for xml in IRS:
        for var_id, names in _read_values(xml):
            read = [n for n in names if var_id.startswith(n) and len(n) < len(var_id)]
            if read:
                assert split_id(var_id) == (read[0], var_id[len(read[0]) :]), (xml, var_id)
                split += 1
            else:
                assert split_id(var_id) is None, (xml, var_id)
                whole += 1
    assert split > 100 and whole > 10  # the LLMs' KV caches and Mamba states, the LSTMs' h/c; acc, count, ...


@pytest.mark.parametrize(
    ("var_id", "shown"),
    [
        ("past_key_values.1.valuepresent.1.value", "'past_key_values.1.value' -> 'present.1.value'"),
        (
            "cache_params.past.ssm.1cache_params.present.ssm.1",
            "'cache_params.past.ssm.1' -> 'cache_params.present.ssm.1'",
        ),
        ("h_inh_out", "'h_in' -> 'h_out'"),
        ("acc", "'acc'"),
        ("loop/h_prev/variable_0", "'loop/h_prev/variable_0'"),
        ("aa", "'aa'"),
        ("", "''"),
    ],
)
def test_shown_id(var_id, shown):
    assert shown_id(var_id) == shown


def test_a_state_error_names_a_glued_variable_split():
    session = ortstate.StatefulSession(REPO / "models" / "lstm_2l_dynbatch" / "model.xml")
    (h,) = [v for v in session.query_state() if v.name == "h_inh_out"]
    assert h.name == "h_inh_out"  # the name to look it up by stays OpenVINO's
    with pytest.raises(StateError) as info:
        h.state = np.zeros((1, 1, 8), np.float32)
    assert str(info.value) == "variable 'h_in' -> 'h_out': cannot set state: shape [1, 1, 8], expected [2,?,16]"


@pytest.mark.parametrize("model", ["openvino_model.xml", "onnx"])
def test_inspect_shows_glued_ids_split(capsys, tmp_path, model):
    path = REPO / "models" / "llm" / "llama" / "openvino_model.xml"
    if model == "onnx":
        ortstate.convert(path, tmp_path / "llama.onnx")
        path = tmp_path / "llama.onnx"
    code, out, _ = run_cli(capsys, "inspect", str(path))
    assert code == 0
    rows = out.split("\nvariables\n")[1].split("\n\n")[0].splitlines()[1:]
    assert [row.split()[:3] for row in rows] == [
        [f"past_key_values.{i}.{kv}", "->", f"present.{i}.{kv}"] for i in (0, 1) for kv in ("key", "value")
    ]

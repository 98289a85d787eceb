""".onnx files are input too: custom-op models whose state nodes or ortstate metadata were crafted or
damaged are refused with an OrtStateError when the session is made, before ONNX Runtime (where a
failing state op aborts the process) runs anything, and a model cannot reach another session's
variables. Scenarios that aborted the process run in their own interpreter."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from isolated import outcome, run_isolated
from onnx import TensorProto, helper, numpy_helper

import ortstate
from ortstate.meta import META_KEY
from ortstate.runtime import pyops
from ortstate.runtime.store import StateStore

ROOT = Path(__file__).resolve().parent.parent
ACC = ROOT / "models/accumulator/model.xml"  # x f32 [1,?]; variable acc; output sum


def custom_model() -> onnx.ModelProto:
    return ortstate.convert(ACC)


def state_node(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.domain == "ai.onnx.contrib" and n.op_type == op_type)


def add_key(model: onnx.ModelProto, value: np.ndarray) -> str:
    model.graph.initializer.append(numpy_helper.from_array(value, "crafted_key"))
    return "crafted_key"


def constant_key(value: np.ndarray) -> Callable[[onnx.ModelProto], None]:
    def craft(model: onnx.ModelProto) -> None:
        state_node(model, "ReadValue").input[1] = add_key(model, value)

    return craft


def computed_key(model: onnx.ModelProto) -> None:
    model.graph.node.insert(0, helper.make_node("Add", ["ortstate.request", add_key(model, np.int64(1))], ["k1"]))
    state_node(model, "ReadValue").input[1] = "k1"


def set_attrs(**attrs: Any) -> Callable[[onnx.ModelProto], None]:
    def craft(model: onnx.ModelProto) -> None:
        node = state_node(model, "Assign")
        del node.attribute[:]
        node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())

    return craft


def extra_input(model: onnx.ModelProto) -> None:
    state_node(model, "ReadValue").input.append("ortstate.request")


def twice(op_type: str) -> Callable[[onnx.ModelProto], None]:
    def craft(model: onnx.ModelProto) -> None:
        twin = model.graph.node.add()
        twin.CopyFrom(state_node(model, op_type))
        twin.name, twin.output[0] = "twin", "twin_out"

    return craft


def fused(model: onnx.ModelProto) -> None:
    node = state_node(model, "ReadValue")
    node.op_type = "ReadValues2"
    node.input.insert(1, node.input[0])
    node.output.append("second")


def request_of_shape_1(model: onnx.ModelProto) -> None:
    key = next(i for i in model.graph.input if i.name == "ortstate.request")
    key.CopyFrom(helper.make_tensor_value_info("ortstate.request", TensorProto.INT64, [1]))


SCENARIO = """
import sys
import numpy as np
import ortstate
# Another session's variables, made first (its request once had the first key handed out).
other = ortstate.StatefulSession(ortstate.convert("models/accumulator/model.xml"), form="custom-op")
other.run(None, {"x": np.full((1, 3), 7, np.float32)})
try:
    session = ortstate.StatefulSession(sys.argv[1], form=sys.argv[2])
    print("ran", session.run(None, {"x": np.ones((1, 3), np.float32)})[0].tolist())
except ortstate.OrtStateError as exc:
    print("refused:", exc)
"""

STATE_NODES = [
    ("constant_key", constant_key(np.int64(1)), "node '.*' \\(ReadValue\\): its key input is 'crafted_key', not the "
     "request key 'ortstate.request'"),
    ("vector_key", constant_key(np.array([1, 2], np.int64)), "its key input is 'crafted_key', not the request key"),
    ("computed_key", computed_key, "its key input is 'k1', not the request key"),
    ("no_variable_id", set_attrs(), r"\(Assign\): a state op has one string attribute, variable_id"),
    ("int_variable_id", set_attrs(variable_id=3), "a state op has one string attribute, variable_id"),
    ("extra_attribute", set_attrs(variable_id="acc", other="x"), "a state op has one string attribute, variable_id"),
    ("unknown_variable", set_attrs(variable_id="nope"), "variable 'nope' is not in the model's ortstate metadata"),
    ("three_inputs", extra_input, "a state op has 2 inputs \\(value, request key\\) and 1 output, not 3 inputs"),
    ("two_assigns", twice("Assign"), "variable 'acc' has 2 Assign nodes, expected 1"),
    ("fused_op", fused, r"\(ReadValues2\): fused state ops are made by the runtime, not read from a model"),
    ("request_not_scalar", request_of_shape_1, "request key 'ortstate.request' must be a int64 scalar input"),
]  # fmt: skip


@pytest.mark.parametrize("form", ["custom-op", "auto"])
@pytest.mark.parametrize(("name", "craft", "message"), STATE_NODES, ids=[c[0] for c in STATE_NODES])
def test_crafted_state_nodes_are_refused_at_load(
    tmp_path: Path, form: str, name: str, craft: Callable[[onnx.ModelProto], None], message: str
) -> None:
    model = custom_model()
    craft(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    proc = run_isolated(SCENARIO, str(path), form)
    assert proc.returncode == 0, outcome(proc)
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith(f"refused: {path}: "), line
    assert __import__("re").search(message, line), line


def test_a_second_reading_of_a_variable_is_fine() -> None:
    """Two ReadValue nodes of one variable read one value: such a model runs (custom-op form)."""
    model = custom_model()
    twice("ReadValue")(model)
    session = ortstate.StatefulSession(model)
    assert session.form == "custom-op"
    session.run(None, {"x": np.ones((1, 3), np.float32)})
    assert session.run(None, {"x": np.ones((1, 3), np.float32)})[0].tolist() == [[2, 2, 2]]


def test_request_keys_are_not_guessable() -> None:
    """Keys are random 63-bit numbers, not a count: no model could name another request's."""
    stores = [StateStore(()) for _ in range(50)]
    keys = [pyops.register_store(store) for store in stores]
    for key in keys:
        pyops.unregister_store(key)
    assert len(set(keys)) == 50 and max(keys) > 2**40


# -- the ortstate metadata ----------------------------------------------------------------------------
def with_meta(model: onnx.ModelProto, change: Callable[[dict], object]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    prop = next(p for p in out.metadata_props if p.key == META_KEY)
    data = json.loads(prop.value)
    result = change(data)
    prop.value = result if isinstance(result, str) else json.dumps(data)
    return out


V0 = r"variables\[0\]"


def var(field: str, value: Any) -> Callable[[dict], None]:
    return lambda d: d["variables"][0].__setitem__(field, value)


def top(field: str, value: Any) -> Callable[[dict], None]:
    return lambda d: d.__setitem__(field, value)


METADATA = [
    ("form_int", top("form", 5), "form: expected one of custom-op, explicit, got 5"),
    ("variables_str", top("variables", "x"), "variables: expected a list, got 'x'"),
    ("variable_int", top("variables", [5]), V0 + r": expected an object, got 5"),
    ("version_str", top("version", "1"), "metadata format version '1', expected 1"),
    ("version_true", top("version", True), "metadata format version True, expected 1"),
    ("unknown_field", top("colour", "red"), "metadata: unknown field\\(s\\) colour"),
    ("missing_form", lambda d: d.__delitem__("form"), "metadata: missing field\\(s\\) form"),
    ("missing_shape", lambda d: d["variables"][0].pop("shape"), V0 + r": missing field\(s\) shape"),
    ("id_int", var("id", 3), V0 + r".id: expected a non-empty string, got 3"),
    ("id_twice", lambda d: d["variables"].append(dict(d["variables"][0])), "variables: id 'acc' is listed twice"),
    ("dtype_unknown", var("dtype", "float8"), V0 + r".dtype: expected one of float32, .*got 'float8'"),
    ("dtype_object", var("dtype", "object"), V0 + r".dtype: expected one of"),
    ("carrier_int", var("carrier", 4), V0 + r".carrier: expected one of .* or null, got 4"),
    ("shape_str", var("shape", "abc"), V0 + r".shape: expected a list, got 'abc'"),
    ("shape_negative", var("shape", [1, -1]), V0 + r".shape\[1\]: expected an integer >= 0, got -1"),
    ("shape_short_range", var("shape", [1, [1]]), V0 + r".shape\[1\]: expected a dim: .*, got \[1\]"),
    ("shape_bad_range", var("shape", [1, [4, 2]]), V0 + r".shape\[1\]\[1\]: expected an integer >= 4, got 2"),
    ("shape_float", var("shape", [1, 2.5]), V0 + r".shape\[1\]: expected an integer >= 0, got 2.5"),
    ("init_shape_bool", var("init_shape", [True, 0]), V0 + r".init_shape\[0\]: expected an integer >= 0, got True"),
    ("uninit_shape_str", var("uninit_shape", "0,4"), V0 + r".uninit_shape: expected a list, got '0,4'"),
    ("uninit_shape_rank", var("uninit_shape", [0]), V0 + r".uninit_shape: expected 2 dims, as the variable's shape"),
    ("uninit_shape_huge", var("uninit_shape", [2**21, 2**21]), V0 + r": variable 'acc' spans more than"),
    ("init_unknown", var("init", "maybe"), V0 + r".init: expected one of zeros, computed, got 'maybe'"),
    ("init_flag_int", var("init_flag", 1), V0 + r".init_flag: expected a non-empty string or null, got 1"),
    ("extra_not_strings", top("extra", {"a": 1}), "extra: expected an object of strings"),
    ("huge_static_shape", var("shape", [1, 2**40 + 1]), V0 + r": variable 'acc' spans more than 1099511627776"),
    ("huge_zero_size", var("init_shape", [0, 2**40, 2**40]), V0 + r": variable 'acc' spans more than"),
    ("huge_init", var("init_shape", [1, 2**30]), V0 + r": variable 'acc' starts at 4294967296 bytes"),
    ("deep_json", lambda d: "[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
    ("not_json", lambda d: "{", "Expecting property name"),
    ("request_input_int", top("request_input", 7), "request_input: expected a non-empty string or null, got 7"),
]  # fmt: skip


@pytest.mark.parametrize("explicit", [False, True], ids=["custom-op", "explicit"])
@pytest.mark.parametrize(("name", "change", "message"), METADATA, ids=[c[0] for c in METADATA])
def test_malformed_metadata_is_refused_at_load(
    explicit: bool, name: str, change: Callable[[dict], object], message: str
) -> None:
    model = with_meta(ortstate.convert(ACC, explicit_state=explicit), change)
    for form in ("auto", "custom-op") if not explicit else ("auto",):
        with pytest.raises(ortstate.OrtStateError, match=rf"^model: malformed ortstate metadata: {message}"):
            ortstate.StatefulSession(model, form=form)


MISWIRED = [
    (True, var("state_input", "nope"), "variable 'acc': state input 'nope' is not a graph input"),
    (True, var("state_output", "x"), "variable 'acc': state output 'x' is not a graph output"),
    (True, var("init_flag", "x"), "variable 'acc': init flag 'x' must be a bool scalar input"),
    (False, top("request_input", "x"), "request key 'x' must be a int64 scalar input"),
    (False, top("request_input", None), "request key 'None' is not a graph input of the model"),
]  # fmt: skip


@pytest.mark.parametrize(("explicit", "change", "message"), MISWIRED)
def test_metadata_naming_the_wrong_graph_inputs_is_refused(
    explicit: bool, change: Callable[[dict], object], message: str
) -> None:
    model = with_meta(ortstate.convert(ACC, explicit_state=explicit), change)
    with pytest.raises(ortstate.OrtStateError, match=f"^model: {message}$"):
        ortstate.StatefulSession(model)

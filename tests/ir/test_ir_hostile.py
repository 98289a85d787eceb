"""IR files as an attacker (or an accident) writes them: absurd variable sizes, a ``.bin`` or ``.xml``
that is no regular file, user names that look like ortstate's own, names with surrounding
whitespace, and layers with thousands of outputs. Each converts and runs as OpenVINO does, or is
refused with an OrtStateError naming the file."""

from __future__ import annotations

import json
import mmap
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from isolated import outcome, run_isolated
from openvino import opset6
from oracle import REPO, RESET, REWRITTEN, check_model, check_steps, form_name, save_ir, variable

import ortstate
from ortstate.ir.reader import read_ir
from ortstate.meta import NAME_PREFIX_CHARS
from ortstate.meta.names import shown_id, shown_name

ACC = REPO / "models/accumulator/model.xml"


def big_variable_ir(tmp_path: Path, shape: list[int]) -> Path:
    x = ops.parameter([1], np.float32, name="x")
    var = variable("v", shape)
    new = ops.add(opset6.read_value(var), x)
    total = ops.reduce_sum(new, ops.constant(np.arange(len(shape))), False)
    return save_ir(ov.Model([ops.result(total)], [opset6.assign(new, var)], [x], "big"), tmp_path, "big")


@pytest.mark.parametrize("explicit", [False, True], ids=["custom-op", "explicit"])
@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([2**40], r"its initial value \[1099511627776\] takes 4398046511104 bytes, the limit is 2147483648"),
        ([2**33], r"its initial value \[8589934592\] takes 34359738368 bytes"),
        ([0, 2**40, 2**40], r"shape \[0,1099511627776,1099511627776\] spans more than 1099511627776 elements"),
    ],
    ids=["2^40", "2^33", "zero-size"],
)
def test_absurd_variable_sizes_are_refused(tmp_path: Path, explicit: bool, shape: list[int], message: str) -> None:
    xml = big_variable_ir(tmp_path, shape)
    with pytest.raises(
        ortstate.StateError, match=rf"^{xml}: layer '.*' \(id 1, ReadValue-6\): variable 'v': {message}"
    ):
        ortstate.convert(xml, explicit_state=explicit)


READ = """
import sys
import ortstate
try:
    ortstate.convert(sys.argv[1], explicit_state=sys.argv[2] == "explicit")
    print("converted")
except ortstate.OrtStateError as exc:
    print("refused:", exc)
"""


def _bin_to_dev_zero(folder: Path) -> tuple[Path, str]:
    (folder / "model.bin").unlink()
    (folder / "model.bin").symlink_to("/dev/zero")
    return folder / "model.xml", f"weights file {folder / 'model.bin'} is not a regular file"


def _bin_fifo(folder: Path) -> tuple[Path, str]:
    (folder / "model.bin").unlink()
    os.mkfifo(folder / "model.bin")
    return folder / "model.xml", f"weights file {folder / 'model.bin'} is not a regular file"


def _xml_to_dev_zero(folder: Path) -> tuple[Path, str]:
    (folder / "model.xml").unlink()
    (folder / "model.xml").symlink_to("/dev/zero")
    return folder / "model.xml", "XML file is not a regular file"


def _xml_fifo(folder: Path) -> tuple[Path, str]:
    (folder / "model.xml").unlink()
    os.mkfifo(folder / "model.xml")
    return folder / "model.xml", "XML file is not a regular file"


@pytest.mark.parametrize("form", ["custom-op", "explicit"])
@pytest.mark.parametrize("damage", [_bin_to_dev_zero, _bin_fifo, _xml_to_dev_zero, _xml_fifo])
def test_ir_files_must_be_regular_files(tmp_path: Path, form: str, damage: Callable[[Path], tuple[Path, str]]) -> None:
    """A ``.bin`` linked to ``/dev/zero`` was read without end, a FIFO blocked forever."""
    for name in ("model.xml", "model.bin"):
        shutil.copy(ACC.parent / name, tmp_path / name)
    xml, message = damage(tmp_path)
    proc = run_isolated(READ, str(xml), form, timeout=60, memory=3 << 30)
    assert proc.returncode == 0, outcome(proc)
    assert proc.stdout.strip() == f"refused: {xml}: {message}", outcome(proc)


def test_the_bin_is_read_only_as_far_as_the_xml_declares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``.bin`` far longer than its constants (junk appended) converts, reading no more than needed."""
    shutil.copy(ACC, tmp_path / "model.xml")
    data = (ACC.parent / "model.bin").read_bytes()
    (tmp_path / "model.bin").write_bytes(data + b"\0" * (64 << 20))
    mapped: list[int] = []
    real_mmap = mmap.mmap

    def mapping(fd: int, length: int, *args: object, **kwargs: object) -> mmap.mmap:
        mapped.append(length)
        return real_mmap(fd, length, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mmap, "mmap", mapping)
    model = ortstate.convert(tmp_path / "model.xml")
    assert mapped == [len(data)]  # the .bin is mapped as far as its constants reach, no further
    monkeypatch.undo()
    session = ortstate.StatefulSession(model)
    assert session.run(None, {"x": np.ones((1, 3), np.float32)})[0].tolist() == [[1, 1, 1]]


def _named(node: ov.Node | ov.Output, *names: str) -> ov.Output:
    out = node.output(0) if isinstance(node, ov.Node) else node
    out.set_names(set(names))
    return out


def internal_names_ir(tmp_path: Path) -> Path:
    """An accumulator whose user inputs and outputs carry the names ortstate gives its own: the
    request key, a state input, an init flag; a state output."""
    x = ops.parameter([1, 3], np.float32, name="x")
    others = [ops.parameter([1, 3], np.float32, name=n) for n in ("ortstate.in.acc", "ortstate.init.acc")]
    key = ops.parameter([], np.int64, name="ortstate.request")
    for p in [x, *others, key]:
        _named(p, p.get_friendly_name())
    var = variable("acc", [1, 3])
    init = ops.broadcast(ops.constant(np.float32(0)), ops.shape_of(x))
    acc = ops.add(ops.add(opset6.read_value(init, var), x), ops.add(others[0], others[1]))
    shifted = ops.add(acc, ops.convert(key, "f32"))
    results = [ops.result(_named(acc, "ortstate.out.acc")), ops.result(_named(shifted, "ortstate.out.acc_1"))]
    model = ov.Model(results, [opset6.assign(acc, var)], [x, *others, key], "names")
    return save_ir(model, tmp_path, "names")


def test_the_models_own_names_win_over_internal_ones(tmp_path: Path) -> None:
    """Its inputs and outputs keep their names in every form (check_steps compares them with
    OpenVINO's), and the state keeps working under the suffixed internal names."""
    xml = internal_names_ir(tmp_path)
    rng = np.random.default_rng(5)

    def feed() -> dict[str, np.ndarray]:
        data = {
            n: rng.standard_normal((1, 3)).astype(np.float32) for n in ("x", "ortstate.in.acc", "ortstate.init.acc")
        }
        return {**data, "ortstate.request": np.array(3, np.int64)}

    check_steps(xml, [feed(), feed(), RESET, feed()])
    for explicit in (False, True):
        meta = ortstate.meta.read_meta(ortstate.convert(xml, explicit_state=explicit))
        assert meta is not None
        names = [meta.request_input, *(n for v in meta.variables for n in (v.init_flag, v.state_input, v.state_output))]
        assert [n for n in names if n] == (
            ["ortstate.init.acc_1", "ortstate.in.acc_1", "ortstate.out.acc_2"] if explicit else ["ortstate.request_1"]
        )


def test_tensor_names_keep_their_whitespace(tmp_path: Path) -> None:
    """OpenVINO keeps spaces around tensor names (and drops empty ones): so do inputs and outputs."""
    x = ops.parameter([1, 3], np.float32, name="x")
    _named(x, " x ", "x2 ")
    y = ops.relu(x)
    _named(y, " y")
    xml = save_ir(ov.Model([ops.result(y)], [x], "spaces"), tmp_path, "spaces")
    text = xml.read_text().replace('names=" x ,x2 "', 'names=" a\\, b ,, c, "')
    assert text != xml.read_text()
    xml.write_text(text)
    check_steps(xml, [{" ": np.ones((1, 3), np.float32)}], forms=(False, True), check_states=False)
    session = ortstate.StatefulSession(xml)
    assert [i.name for i in session.get_inputs()] == [" "] and [o.name for o in session.get_outputs()] == [" y"]


@pytest.mark.parametrize(
    "names",
    ["a&#10;b", "a\nb", "&#10;", "a\\,b&#10;,c", "a&#13;b,&#9;", "a\\&#10;b", "a\\b\\", "p/q:0.r,π🔑"],
)
def test_tensor_names_are_read_as_openvino_reads_them(tmp_path: Path, names: str) -> None:
    """Only commas separate names: a newline (``&#10;``) is part of one, as OpenVINO reads it (the
    reader split names at newlines: the input ``a&#10;b`` was named ``a``, ``&#10;`` lost)."""
    x = ops.parameter([1, 3], np.float32, name="x")
    _named(x, "x")
    xml = save_ir(ov.Model([ops.result(_named(ops.relu(x), "y"))], [x], "names"), tmp_path, "names")
    xml.write_text(xml.read_text().replace('names="x"', f'names="{names}"'))
    want = ov.Core().read_model(xml).inputs[0].get_names()
    (param,) = [layer for layer in read_ir(xml).layers.values() if layer.type == "Parameter"]
    assert set(param.outputs[0].names) == want
    check_model(xml, {min(want): np.array([[-1, 0, 2]], np.float32)})


def wide_ir(tmp_path: Path, n: int) -> Path:
    """A Split into ``n`` outputs, each a Result and all gathered by a Concat of ``n`` inputs."""
    x = ops.parameter([n, 2], np.float32, name="x")
    parts = ops.split(x, ops.constant(np.int64(0)), n).outputs()
    results = [ops.result(ops.relu(p)) for p in parts] + [ops.result(ops.concat(parts, 1))]
    return save_ir(ov.Model(results, [x], "wide"), tmp_path, f"wide{n}")


def _ortstate_lines(call: Callable[[], object]) -> int:
    """How many lines of ortstate's own code ``call`` executes: a measure of its work that does not
    depend on the machine's speed (no timing in tests)."""
    root = str(Path(ortstate.__file__).parent)
    count = 0

    def local(frame: object, event: str, arg: object) -> Callable[..., object]:
        nonlocal count
        count += event == "line"
        return local

    def tracer(frame: object, event: str, arg: object) -> Callable[..., object] | None:
        return local if frame.f_code.co_filename.startswith(root) else None  # type: ignore[attr-defined]

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


def test_conversion_work_grows_linearly_with_a_layers_outputs(tmp_path: Path) -> None:
    """Name and port lookups are constant-time: doubling the outputs of one layer (and the inputs of
    another) doubles the work; it was quadratic (2,000/4,000/8,000 outputs took 0.6/2.0/7.6 s)."""
    small, large = (_ortstate_lines(lambda n=n: ortstate.convert(wide_ir(tmp_path, n))) for n in (400, 800))
    assert large < 2.2 * small, (small, large)
    session = ortstate.StatefulSession(wide_ir(tmp_path, 800))
    outs = session.run(None, {"x": np.arange(1600, dtype=np.float32).reshape(800, 2) - 800})
    assert len(outs) == 801 and outs[5].tolist() == [[0, 0]] and outs[-1].shape == (1, 1600)


def long_names_ir(tmp_path: Path, n: int) -> tuple[Path, list[str], tuple[str, str]]:
    """Two accumulators whose every name has ``n`` characters or more: the variable ids (a run of
    one character, which split_id read in quadratic time; a glued pair as MakeStateful writes it),
    every layer's name and every tensor's, one input named as the explicit form names a state
    input. Returns the IR, its inputs' names and the glued id's two halves."""
    pad = "n" * n
    past, present = f"past.{pad[: n // 2]}", f"present.{pad[: n // 2]}"
    x, y = (ops.parameter([1, 3], np.float32) for _ in range(2))
    init = ops.broadcast(ops.constant(np.float32(0)), ops.shape_of(x))  # computed: an init flag
    first, glued = variable("a" * n, [1, 3]), variable(past + present, [1, 3])
    acc = ops.add(ops.add(opset6.read_value(init, first), x), y)
    total = ops.add(opset6.read_value(init, glued), ops.multiply(acc, ops.constant(np.float32(2))))
    out = ops.concat(ops.split(total, ops.constant(np.int64(1)), 3).outputs()[::-1], 1)
    sinks = [opset6.assign(acc, first), opset6.assign(total, glued)]
    model = ov.Model([ops.result(acc), ops.result(out)], sinks, [x, y], f"long{pad}")
    for i, op in enumerate(model.get_ordered_ops()):
        op.set_friendly_name(f"layer{i}{pad}")
        if op.get_type_name() != "Assign":
            for k, port in enumerate(op.outputs()):
                port.set_names({f"t{i}.{k}{pad}"})
    names = [f"x{pad}", f"ortstate.in.{'a' * n}"]
    for param, name in zip(model.get_parameters(), names):
        param.output(0).set_names({name})
    return save_ir(model, tmp_path, f"long{n}"), names, (past, present)


# Converting and running each IR, on its own interpreter (a regression hangs there, under the
# timeout); the CPU seconds each took, and what refusing a state of the wrong shape said.
RUN_LONG_NAMES = """
import json, sys, time
import numpy as np
from oracle import REWRITTEN, open_session
import ortstate

form = {"custom-op": False, "explicit": True, "rewritten": REWRITTEN}[sys.argv[1]]
report = []
for xml in sys.argv[2:]:
    start = time.process_time()
    session = open_session(xml, form)
    feed = {i.name: np.full((1, 3), k, np.float32) for k, i in enumerate(session.get_inputs(), 1)}
    session.run(None, feed)
    session.reset_state()
    session.run(None, feed)
    (glued,) = [state for state in session.query_state() if state.name.startswith("past.")]
    try:
        glued.state = np.zeros(7, np.float32)
    except ortstate.StateError as exc:
        refused = str(exc)
    report.append({"took": time.process_time() - start, "refused": refused})
print(json.dumps(report[1:]))
"""


@pytest.mark.parametrize("explicit", [False, True, REWRITTEN], ids=form_name)
def test_names_of_100000_characters_cost_time_linear_in_their_length(tmp_path: Path, explicit: bool | str) -> None:
    """Converting, loading, running and refusing a state of an IR whose every name has 100,000
    characters takes under a second of CPU time (the process's own, whatever else loads the
    machine), and at most a few times what names of 25,000 take: split_id tried every cut and
    compared both sides, so a 100,000-character id never finished. Then it runs as OpenVINO does."""
    small, (xml, names, (past, present)) = long_names_ir(tmp_path, 25_000)[0], long_names_ir(tmp_path, 100_000)
    # the small IR twice: the first run pays for what every first conversion loads
    proc = run_isolated(RUN_LONG_NAMES, form_name(explicit), str(small), str(small), str(xml), timeout=120)
    assert proc.returncode == 0, outcome(proc)
    smaller, larger = json.loads(proc.stdout)
    assert larger["took"] < 1.0 and larger["took"] < 6 * smaller["took"], (smaller["took"], larger["took"])
    assert larger["refused"] == f"variable {shown_id(past + present)}: cannot set state: shape [7], expected [1,3]"
    assert len(larger["refused"]) < 2_200  # the names bounded (shown_name)
    feeds = [{name: np.full((1, 3), k + step, np.float32) for k, name in enumerate(names)} for step in range(3)]
    check_steps(xml, [feeds[0], feeds[1], RESET, feeds[2]], forms=(explicit,))


def test_a_long_layer_name_is_repeated_as_its_prefix(tmp_path: Path) -> None:
    """A Split into 400 outputs whose layer has a name of 100,000 characters: each of its ONNX
    values and nodes is named from the name's first NAME_PREFIX_CHARS characters, doc strings too,
    so the model holds a few of them per output (each value is named where it is made and where it
    is read: 1.3 MB, where it held 120 MB of copies of the name), and it runs as OpenVINO does."""
    xml = wide_ir(tmp_path, 400)
    text = xml.read_text()
    assert text.count('type="Split"') == 1
    xml.write_text(re.sub(r'name="([^"]*)" type="Split"', 'name="' + "s" * 100_000 + '" type="Split"', text))
    model = ortstate.convert(xml)
    assert model.ByteSize() < 400 * 4 * NAME_PREFIX_CHARS, model.ByteSize()
    split = [n for n in model.graph.node if n.op_type == "Split"]
    assert [n.name for n in split] == ["s" * NAME_PREFIX_CHARS + "/Split"]
    assert split[0].output[:2] == ["s" * NAME_PREFIX_CHARS + ":Split", "s" * NAME_PREFIX_CHARS + ":Split_1"]
    assert split[0].doc_string == f"layer '{'s' * NAME_PREFIX_CHARS}' (id 2, Split-1)"
    check_model(xml, {"x": np.arange(800, dtype=np.float32).reshape(400, 2) - 400})


@pytest.mark.parametrize("explicit", [False, True], ids=form_name)
def test_a_run_error_naming_long_names_stays_bounded(tmp_path: Path, explicit: bool) -> None:
    """Feeding the wrong names to a model whose inputs have 100,000 characters: the error lists at
    most 20 names, each bounded (it held every name whole: 200,000 characters and more, as long
    as a caller's feed made it)."""
    xml, names, _ = long_names_ir(tmp_path, 100_000)
    session = ortstate.StatefulSession(ortstate.convert(xml, explicit_state=explicit))
    feed = {f"z{k}" + "q" * 100_000: np.zeros((1, 3), np.float32) for k in range(50)}
    with pytest.raises(ortstate.RunError) as info:
        session.run(None, feed)
    message = str(info.value)
    assert message.startswith(f"missing input(s) {shown_name(names[1])}, {shown_name(names[0])}; unknown input(s) ")
    assert " and 30 more (inputs: " in message and len(message) < 30 * 2_200, len(message)

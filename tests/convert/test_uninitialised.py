"""What a variable shows before its first run, after a reset and after a snapshot of that, against
OpenVINO (``ortstate/convert/uninitialised.py``): zeros of the variable's shape with its dynamic dims
0, except for an init OpenVINO's CPU plugin computes inside the state (then the init's shape), in
every form, for ``StatefulSession.query_state()`` and ``InferRequest.query_state()``, shape and dtype.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino import opset3, opset6
from oracle import (
    RESET,
    REWRITTEN,
    assert_close,
    check_steps,
    form_name,
    open_session,
    ov_request,
    ov_states,
    query,
    save_ir,
    set_state,
    variable,
)

import ortstate
from ortstate.meta import META_KEY

X = np.arange(4, dtype=np.float32).reshape(1, 4) + 1
Init = Callable[[Any, Any, Any], Any]  # (x: [?,4], s: static [1,4], dtype) -> the init value


def _const(value: float) -> Init:
    return lambda x, s, dtype: ops.constant(np.full((1, 4), value, dtype))


# name: (variable_shape (None: ReadValue-3, no variable), init (None: no init input), shown)
CASES: dict[str, tuple[list | None, Init | None, tuple[int, ...]]] = {
    "v3-constant": (None, _const(0.5), (1, 4)),  # a ReadValue-3 variable takes its init's shape
    "v3-shape-of-input": (None, lambda x, s, t: ops.broadcast(ops.constant(t(0)), ops.shape_of(x)), (0, 4)),
    "v6-no-init": ([-1, 4], None, (0, 4)),
    "v6-static-no-init": ([1, 4], None, (1, 4)),
    "v6-static-constant": ([1, 4], _const(0.5), (1, 4)),
    "v6-static-computed": ([1, 4], lambda x, s, t: ops.multiply(s, ops.constant(t(2))), (1, 4)),
    "v6-constant": ([-1, 4], _const(0.5), (0, 4)),
    "v6-zeros-constant": ([-1, 4], _const(0), (0, 4)),
    "v6-folded-broadcast": (
        [-1, 4],
        lambda x, s, t: ops.broadcast(ops.constant(t(1)), ops.constant(np.array([1, 4], np.int64))),
        (0, 4),
    ),
    "v6-shape-of-static-input": ([-1, 4], lambda x, s, t: ops.broadcast(ops.constant(t(0)), ops.shape_of(s)), (0, 4)),
    "v6-parameter-itself": ([-1, 4], lambda x, s, t: s, (0, 4)),
    "v6-computed-static": ([-1, 4], lambda x, s, t: ops.multiply(s, ops.constant(t(2))), (1, 4)),
    "v6-computed-dynamic": ([-1, 4], lambda x, s, t: ops.multiply(x, ops.constant(t(2))), (0, 4)),
    "v6-computed-dims-unknown": ([-1, -1], lambda x, s, t: ops.multiply(x, ops.constant(t(2))), (0, 4)),
    "v6-shared-with-an-output": ([-1, 4], "shared", (0, 4)),  # type: ignore[dict-item]
}
DTYPES = {"float32": np.float32, "float16": np.float16, "int32": np.int32}
# Where OpenVINO's CPU plugin shows what its f16 handling makes of the model, not what the IR says:
# computing f16 in f32 (the f32 precision hint), it retypes a ReadValue-3's f16 variable to f32 and
# puts a Convert in front of a ReadValue-6, which then counts as an init computed inside the state
# (a Parameter read as it is then fails to compile). ortstate is held to the table there.
F16_ARTIFACTS = {"v3-constant", "v3-shape-of-input", "v6-parameter-itself", "v6-shared-with-an-output"}
PARAMS = [(case, dtype) for case in sorted(CASES) for dtype in sorted(DTYPES)]


def build(tmp_path: Path, case: str, dtype: Any) -> Path:
    """``acc = read(acc) + x`` (an output), with the case's variable and init; ``s`` is a static
    [1,4] input some inits use. "shared": the init ``s * 2`` is also an output of its own."""
    var_shape, make, _ = CASES[case]
    x = ops.parameter([-1, 4], dtype, name="x")
    s = ops.parameter([1, 4], dtype, name="s")
    results = []
    if make == "shared":
        init = ops.multiply(s, ops.constant(dtype(2)))
        results.append(ops.result(init))
    else:
        init = None if make is None else make(x, s, dtype)
    if var_shape is None:
        read = opset3.read_value(init, "acc")
        add = ops.add(read, x)
        sink = opset3.assign(add, "acc")
    else:
        var = variable("acc", var_shape, dtype)
        read = opset6.read_value(var) if init is None else opset6.read_value(init, var)
        add = ops.add(read, x)
        sink = opset6.assign(add, var)
    model = ov.Model([ops.result(add), *results], [sink], [x, s], "uninit")
    return save_ir(model, tmp_path, "uninit")


def through_snapshot(path: Path) -> Callable[[Any], None]:
    """A step saving ortstate's variables and loading them back (OpenVINO's stay as they are): an
    uninitialised variable stays uninitialised, and shows what OpenVINO shows."""

    def step(runner: Any) -> None:
        if not isinstance(runner, ov.InferRequest):
            runner.save_state(path)
            runner.load_state(path)

    return step


def reset_acc(runner: Any) -> None:
    """``VariableState.reset()`` of the one variable."""
    runner.query_state()[0].reset()


@pytest.mark.parametrize(("case", "dtype"), PARAMS)
def test_uninitialised_state_shows_what_openvino_shows(tmp_path: Path, case: str, dtype: str) -> None:
    """Before the first run, after a run, after reset_state(), a per-variable reset() and a snapshot
    of the uninitialised variable, and around set_state: the same shape, dtype and values as
    OpenVINO, in both forms (and the custom-op model rewritten on load)."""
    np_type = DTYPES[dtype]
    xml = build(tmp_path, case, np_type)
    feeds = {"x": X.astype(np_type), "s": (X * 3).astype(np_type)}
    if dtype == "float16" and case in F16_ARTIFACTS:
        shown = np.zeros(CASES[case][2], np_type)
        for explicit in (False, True, REWRITTEN):
            session = open_session(xml, explicit)
            assert_close(session.query_state()[0].state, shown, f"{form_name(explicit)} before the first run")
            session.run(None, feeds)
            session.reset_state()
            assert_close(session.query_state()[0].state, shown, f"{form_name(explicit)} after a reset")
        return
    snapshot = through_snapshot(tmp_path / "uninit.npz")
    value = np.full((1, 4), 7, np_type)
    steps = [query, snapshot, feeds, RESET, snapshot, feeds, reset_acc, set_state("acc", value), feeds, RESET]
    check_steps(xml, steps, rtol=0, atol=0)
    assert CASES[case][2] == tuple(ov_states(ov_request(xml))["acc"].shape)  # the table says what OpenVINO shows


@pytest.mark.parametrize("explicit", [False, True, REWRITTEN], ids=form_name)
def test_every_request_shows_it(tmp_path: Path, explicit: bool | str) -> None:
    """``StatefulSession.query_state()`` (its default request) and a request of its own show the
    same, each uninitialised until it runs, whatever the other did."""
    xml = build(tmp_path, "v6-constant", np.float32)
    session = open_session(xml, explicit)
    request = session.create_infer_request()
    feeds = {"x": X, "s": X}
    request.run(None, feeds)
    assert_close(session.query_state()[0].state, np.zeros((0, 4), np.float32), "session before its run")
    assert request.query_state()[0].state.shape == (1, 4)
    session.run(None, feeds)
    request.reset_state()
    assert_close(request.query_state()[0].state, np.zeros((0, 4), np.float32), "request after reset")
    assert_close(request.variable("acc").state, np.zeros((0, 4), np.float32), "request.variable after reset")
    assert session.query_state()[0].state.shape == (1, 4)


@pytest.mark.parametrize(("case", "shown"), [("v6-zeros-constant", (0, 4)), ("v6-computed-static", (1, 4))])
def test_a_model_converted_before_uninit_shape_was_recorded(tmp_path: Path, case: str, shown: tuple) -> None:
    """Metadata without ``uninit_shape`` (an earlier ortstate's): a zero init shows the variable's
    shape, dynamic dims 0, as OpenVINO shows a constant init; a computed one its ``init_shape``."""
    model = ortstate.convert(build(tmp_path, case, np.float32))
    prop = next(p for p in model.metadata_props if p.key == META_KEY)
    data = json.loads(prop.value)
    for var in data["variables"]:
        del var["uninit_shape"]
    prop.value = json.dumps(data)
    for form in ("custom-op", "explicit"):
        state = ortstate.StatefulSession(model, form=form).query_state()[0].state
        assert_close(state, np.zeros(shown, np.float32), form)

"""OpenVINO as the oracle: save an ov.Model as IR, convert it, step both runtimes side by side."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import openvino as ov
from openvino.op.util import Variable, VariableInfo

import ortstate

OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
RESET = "reset"  # a step that resets all variables of both runtimes
_core = ov.Core()


def variable(vid: str, shape: Sequence[Any], dtype: Any = np.float32) -> Variable:
    """An OpenVINO variable (for opset6 ReadValue/Assign) of ``shape`` and ``dtype`` (numpy or ov.Type)."""
    info = VariableInfo()
    info.data_shape = ov.PartialShape(list(shape))
    info.data_type = dtype if isinstance(dtype, ov.Type) else ov.Type(dtype)
    info.variable_id = vid
    return Variable(info)


def save_ir(model: ov.Model, directory: Path, name: str = "model", compress: bool = False) -> Path:
    """Write ``model`` as IR v11 (``compress`` as ov.save_model's default f16 weights)."""
    xml = Path(directory) / f"{name}.xml"
    ov.save_model(model, str(xml), compress_to_fp16=compress)
    return xml


def ov_request(xml: Path) -> ov.InferRequest:
    return _core.compile_model(_core.read_model(str(xml)), "CPU", OV_CONFIG).create_infer_request()


def ov_run(request: ov.InferRequest, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    result = request.infer(feeds)
    return [np.array(result[out]) for out in request.model_outputs]


def ov_states(request: ov.InferRequest) -> dict[str, np.ndarray]:
    states = {}
    for s in request.query_state():
        data = np.array(s.state.data)
        if s.state.element_type == ov.Type.bf16:  # OpenVINO hands bf16 bits back typed as float16
            data = data.view(np.uint16).view(ml_dtypes.bfloat16)
        states[s.name] = data
    return states


def ort_states(runner: Any) -> dict[str, np.ndarray]:
    return {s.name: s.state for s in runner.query_state()}


def assert_close(got: np.ndarray, want: np.ndarray, what: str, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != OpenVINO {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != OpenVINO {want.dtype}"
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


# How a test runs ortstate: the custom-op model with its Python state ops, the explicit model, or
# the custom-op model rewritten into the explicit form on load (StatefulSession's default).
REWRITTEN = "rewritten"


def open_session(model: Any, explicit: bool | str = False, **kwargs: Any) -> ortstate.StatefulSession:
    """ortstate on ``model`` (an IR path is converted) in one form: False runs the custom ops,
    True the explicit conversion, ``REWRITTEN`` the custom-op conversion rewritten on load."""
    if isinstance(model, (str, Path)) and str(model).endswith(".xml"):
        model = ortstate.convert(model, explicit_state=explicit is True)
    form = "auto" if explicit == REWRITTEN else ("explicit" if explicit else "custom-op")
    return ortstate.StatefulSession(model, form=form, **kwargs)


def form_name(explicit: bool | str) -> str:
    return explicit if isinstance(explicit, str) else ("explicit" if explicit else "custom-op")


def check_steps(
    xml: Path,
    steps: Sequence[dict[str, np.ndarray] | str | Callable[[Any], None]],
    *,
    forms: Sequence[bool | str] = (False, True, REWRITTEN),
    rtol: float = 1e-5,
    atol: float = 1e-5,
    check_states: bool = True,
) -> None:
    """Run ``steps`` through OpenVINO and ortstate (each form) and compare every output.

    A step is a feed dict, ``RESET``, or a callable applied to both runners (e.g. to set a state).
    Variables are compared after every step.
    """
    for explicit in forms:
        form = form_name(explicit)
        session = open_session(xml, explicit)
        request = ov_request(xml)
        names = [o.get_any_name() for o in request.model_outputs]
        assert [o.name for o in session.get_outputs()] == names, f"{form}: output names"
        assert [i.name for i in session.get_inputs()] == [i.get_any_name() for i in request.model_inputs]
        for index, step in enumerate(steps):
            where = f"{form} step {index}"
            if isinstance(step, str):
                assert step == RESET
                request.reset_state()
                session.reset_state()
            elif callable(step):
                step(request)
                step(session)
            else:
                want = ov_run(request, step)
                got = session.run(None, step)
                for name, g, w in zip(names, got, want):
                    assert_close(g, w, f"{where} output {name}", rtol, atol)
            if check_states:
                want_states = ov_states(request)
                got_states = ort_states(session)
                assert sorted(got_states) == sorted(want_states), f"{where}: variable names"
                for name, w in want_states.items():
                    assert_close(got_states[name], w, f"{where} variable {name}", rtol, atol)


def check_model(
    xml: Path,
    feeds: dict[str, np.ndarray],
    *,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> list[np.ndarray]:
    """A stateless model: one run in each form, compared with OpenVINO. Returns OpenVINO's outputs."""
    check_steps(xml, [feeds], forms=(False, True), rtol=rtol, atol=atol, check_states=False)
    return ov_run(ov_request(xml), feeds)


def single_op(tmp_path: Path, outputs: Any, params: Sequence[Any], name: str = "op", compress: bool = False) -> Path:
    """Save a model whose Results are ``outputs`` (nodes or outputs) and Parameters ``params``."""
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    results = []
    for out in outputs:
        node_outputs = out.outputs() if hasattr(out, "outputs") else [out]
        results.extend(ov.opset13.result(o) for o in node_outputs)
    return save_ir(ov.Model(results, list(params), name), tmp_path, name, compress)

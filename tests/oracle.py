"""OpenVINO as the oracle: save an ov.Model as IR, convert it, step both runtimes side by side."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import ml_dtypes
import numpy as np
import openvino as ov
import pytest
from openvino.op.util import Variable, VariableInfo

import ortstate
from ortstate.cli import main
from ortstate.convert.rnn_layout import GRU, LSTM, RNN

REPO = Path(__file__).resolve().parents[1]  # the checkout: models/ and ortstate/ below it
# OpenVINO's exact config: f32 math, and an f32 KV cache (the CPU plugin fuses a decoder's cache
# into its own attention node and would otherwise keep it in u8 or f16, depending on the CPU).
OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
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


def scalar_variables(xml: Path) -> frozenset[str]:
    """Ids of the variables ``xml`` declares with shape [] (see :func:`ov_states`)."""
    variables = _core.read_model(str(xml)).get_variables()
    return frozenset(
        v.info.variable_id for v in variables if v.info.data_shape.rank.is_static and not len(v.info.data_shape)
    )


def ov_states(request: ov.InferRequest, scalars: frozenset[str] = frozenset()) -> dict[str, np.ndarray]:
    """OpenVINO's variables. Those named in ``scalars`` are read as the scalars they are: the CPU
    plugin hands a scalar variable's state back as shape [1] (outputs read from it stay scalars)."""
    states = {}
    for s in request.query_state():
        data = np.array(s.state.data)
        if s.state.element_type == ov.Type.bf16:  # OpenVINO hands bf16 bits back typed as float16
            data = data.view(np.uint16).view(ml_dtypes.bfloat16)
        states[s.name] = data.reshape(()) if s.name in scalars and data.size == 1 else data
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


def set_state(name: str, value: np.ndarray) -> Callable[[Any], None]:
    """A :func:`check_steps` step setting variable ``name`` to ``value`` in both runtimes."""

    def step(runner: Any) -> None:
        for state in runner.query_state():
            if state.name == name:
                state.state = ov.Tensor(value) if isinstance(runner, ov.InferRequest) else value

    return step


def query(_runner: Any) -> None:
    """A :func:`check_steps` step changing nothing: the variables are compared as they are (before
    the first run, after a reset)."""


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
    scalars = scalar_variables(xml)
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
                want_states = ov_states(request, scalars)
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


# -- helpers of the one-op tests ---------------------------------------------------------------
DTYPES = [np.float32, np.int32, np.int64]  # the element types most one-op tests run in
_VALUES_RNG = np.random.default_rng(0)


def values(shape: Any, dtype: Any) -> np.ndarray:
    """Random values of ``shape`` (spread over about +-30) as ``dtype``."""
    return np.asarray(_VALUES_RNG.standard_normal(shape) * 10).astype(dtype)


def run_unary(tmp_path: Path, make: Callable[..., Any], values: np.ndarray, rtol: float = 1e-5) -> None:
    """``make(x)`` on one Parameter fed ``values``, checked against the OpenVINO CPU plugin."""
    x = ov.opset13.parameter(values.shape, values.dtype, name="x")
    check_model(single_op(tmp_path, make(x), [x]), {"x": values}, rtol=rtol, atol=rtol)


UNARY_FLOATS = [np.float32, np.float16, np.float64]
UNARY_INTS = [np.int32, np.int64, np.int8, np.uint8, np.int16]
# A table of unary ops: {op (its openvino.opset13 builder): (float values, integer values or None
# where OpenVINO has no integer form worth testing)}.
UnaryTable = dict[str, tuple[list[float], list[int] | None]]


def unary_cases(table: UnaryTable, no_unsigned: Collection[str] = ()) -> list[tuple[str, Any]]:
    """The (op, dtype) pairs of ``table`` OpenVINO defines: float math on integers too, except where
    the table says floats only (and no unsigned types for the ops in ``no_unsigned``)."""
    return [
        (op, dtype)
        for op, (_, ints) in table.items()
        for dtype in UNARY_FLOATS + UNARY_INTS
        if np.issubdtype(dtype, np.floating)
        or (ints is not None and not (op in no_unsigned and np.issubdtype(dtype, np.unsignedinteger)))
    ]


def unary_values(table: UnaryTable, op: str, dtype: Any) -> np.ndarray:
    """``op``'s test values from ``table`` as a [1, n] array of ``dtype`` (unsigned: the non-negative ones)."""
    floats, ints = table[op]
    if np.issubdtype(dtype, np.floating):
        return np.array(floats, dtype).reshape(1, -1)
    assert ints is not None
    ints = [v for v in ints if v >= 0] if np.issubdtype(dtype, np.unsignedinteger) else ints
    return np.array(ints, dtype).reshape(1, -1)


def binary(tmp_path: Path, make: Callable[..., Any], x: np.ndarray, y: np.ndarray, name: str = "op") -> Path:
    """``make(a, b)`` on two Parameters, checked against the OpenVINO CPU plugin."""
    a = ov.opset13.parameter(x.shape, x.dtype, name="a")
    b = ov.opset13.parameter(y.shape, y.dtype, name="b")
    xml = single_op(tmp_path, make(a, b), [a, b], name)
    check_model(xml, {"a": x, "b": y})
    return xml


def check_spec(tmp_path: Path, make: Callable[..., Any], *arrays: np.ndarray, want: np.ndarray) -> None:
    """ortstate (both forms) on ``make(*params)`` must give ``want``, the op spec written in numpy.

    For where the CPU plugin departs from the spec. OpenVINO's reference implementation must agree
    with ``want`` too, where it has a kernel for the type.
    """
    params = [ov.opset13.parameter(a.shape, a.dtype, name=f"in{i}") for i, a in enumerate(arrays)]
    feeds = {f"in{i}": a for i, a in enumerate(arrays)}
    node = make(*params)
    xml = single_op(tmp_path, node, params, "spec")
    for explicit in (False, True):
        got = open_session(xml, explicit).run(None, feeds)[0]
        assert_close(got, want, f"explicit_state={explicit}")
    if node.get_output_partial_shape(0).is_dynamic:
        return
    fed = dict(zip((p.get_name() for p in params), arrays))
    inputs = [v.get_node() for v in node.input_values()]
    values = [fed[n.get_name()] if n.get_type_name() == "Parameter" else getattr(n, "data", None) for n in inputs]
    if any(v is None for v in values):
        return
    out = ov.Tensor(node.get_output_element_type(0), node.get_output_shape(0))
    if node.evaluate([out], [ov.Tensor(np.ascontiguousarray(v)) for v in values]):
        assert_close(out.data, want, "OpenVINO reference implementation")


def assert_layer(xml: Path, op_type: str, version: str) -> None:
    """The saved IR holds the op under test (OpenVINO did not fold or rewrite it away)."""
    found = {(e.get("type"), e.get("version")) for e in ElementTree.parse(xml).iter("layer")}
    assert (op_type, version) in found, f"{op_type} {version} not in {sorted(found)}"


def drop_input(xml: Path, op_type: str, port_index: int) -> None:
    """Rewrite the IR without an optional input (OpenVINO's Python builders always add it) and its Const."""
    tree = ElementTree.parse(xml)
    layer = next(e for e in tree.iter("layer") if e.get("type") == op_type)
    port = layer.find("input").findall("port")[port_index]  # type: ignore[union-attr]
    edges = tree.getroot().find("edges")
    edge = next(e for e in edges if e.get("to-layer") == layer.get("id") and e.get("to-port") == port.get("id"))  # type: ignore[union-attr]
    edges.remove(edge)  # type: ignore[union-attr]
    layer.find("input").remove(port)  # type: ignore[union-attr]
    layers = tree.getroot().find("layers")
    layers.remove(next(e for e in layers if e.get("id") == edge.get("from-layer")))  # type: ignore[union-attr]
    tree.write(xml)


def op_types(xml: Path) -> list[str]:
    """The op types of ``xml``'s conversion, in node order."""
    return [n.op_type for n in ortstate.convert(xml).graph.node]


_NORMAL_RNG = np.random.default_rng(3)


def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
    """Random f32 values of ``shape``, standard normal times ``scale``."""
    return (_NORMAL_RNG.standard_normal(shape) * scale).astype(np.float32)


def param(name: str, shape: Sequence[int], dtype: Any = np.float32, dynamic: tuple[int, ...] = ()) -> Any:
    """A Parameter whose dims listed in ``dynamic`` are -1."""
    dims = [-1 if i in dynamic else d for i, d in enumerate(shape)]
    return ov.opset13.parameter(ov.PartialShape(dims), dtype, name=name)


def onnx_ops(xml: Path) -> Counter:
    """How many nodes of each op type ``xml``'s conversion has."""
    return Counter(n.op_type for n in ortstate.convert(xml).graph.node)


def layer_versions(xml: Path, op_type: str) -> set[str]:
    """The opset versions of the ``op_type`` layers in the saved IR."""
    return {e.get("version") for e in ElementTree.parse(xml).iter("layer") if e.get("type") == op_type}  # type: ignore[misc]


# -- the recurrent families (cells and sequences share them) ------------------------------------
RNN_INPUT = 3  # input size of the recurrent test models
RNN_FAMILIES = {"lstm": LSTM, "gru": GRU, "rnn": RNN}
RNN_GATES = {kind: family.gates for kind, family in RNN_FAMILIES.items()}
RNN_ALT_ACTIVATIONS = {  # non-default functions OpenVINO's CPU plugin runs (it has no hardsigmoid: tested apart)
    "lstm": (["tanh", "relu", "sigmoid"], [], []),
    "gru": (["tanh", "relu"], [], []),
    "rnn": (["relu"], [], []),
}


# -- the CLI ----------------------------------------------------------------------------------------
# What ``ortstate generate`` prints last (its timing summary), on stderr.
SUMMARY = re.compile(
    r"ortstate: (encoder [\d.]+ ms; )?prefill [\d.]+ ms \((\d+) prompt tokens?\); "
    r"decode (\d+) tokens?: median \d+ µs, p90 \d+ µs per token \((custom-op|explicit) form, (.+)\)\n"
)


def run_cli(capsys: Any, *argv: Any) -> tuple[int, str, str]:
    """``ortstate <argv>`` in this process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, expected: str) -> None:
    """The CLI failed with exactly one line: ``expected``."""
    assert "Traceback" not in err
    assert err == f"ortstate: error: {expected}\n"


def ids_arg(ids: list[int]) -> str:
    """Token ids as the CLI takes them."""
    return ",".join(map(str, ids))


def linked_copy(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> Path:
    """``src``'s files symlinked into ``dst`` (a model folder to add or leave out files)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name not in skip:
            (dst / f.name).symlink_to(f)
    return dst


# -- a bad call changes nothing --------------------------------------------------------------------
def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """The same variables, bit for bit."""
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def check_bad_calls_change_nothing(
    session: ortstate.StatefulSession,
    good: list[dict[str, np.ndarray]],
    bad: list[tuple[Callable[[ortstate.InferRequest], object], type[Exception], str]],
) -> None:
    """Before every third good step, make every bad call: each raises as expected and leaves every
    variable as it was; the good steps give exactly what they give on a request that saw no bad call.
    (Good steps in a row with steady shapes let either form's bound fast path serve some of them, and
    the bad calls then hit it.)"""
    reference = session.create_infer_request()
    want = [reference.run(None, feed) for feed in good]
    request = session.create_infer_request()
    for step, feed in enumerate(good):
        for call, error, pattern in bad if step % 3 == 1 else []:
            before = ort_states(request)
            with pytest.raises(error, match=pattern):
                call(request)
            assert_same(ort_states(request), before)
        for got, expected in zip(request.run(None, feed), want[step]):
            np.testing.assert_array_equal(got, expected, err_msg=f"step {step}")
    assert_same(ort_states(request), ort_states(reference))
    assert request.bound

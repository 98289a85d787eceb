"""The runners ``ortstate bench`` puts side by side; each does one model step per ``step`` call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import onnx
import onnxruntime as ort

from ..convert import convert
from ..errors import OrtStateError, RunError
from ..meta import EXPLICIT, VariableMeta, initial_shape, read_meta
from ..runtime import StatefulSession
from ..runtime.options import quiet_session_options, tune_session_options
from ..runtime.ort_adapter import FastRun
from ..runtime.pingpong import bind_output
from .workloads import Feeds, Workload

__all__ = ["LABELS", "RUNNERS", "Floor", "Runner", "make_runners", "session_options"]

LABELS = {
    "openvino": "OpenVINO `infer(feeds)`",
    "openvino-shared": "OpenVINO `infer(feeds, share_inputs=True)`",
    "custom-op": "ortstate custom-op form (Python state ops)",
    "auto": 'ortstate custom-op model, `form="auto"` (rewritten to explicit on load)',
    "explicit": "ortstate explicit form",
    "floor": "floor: bare ORT + IOBinding, no state management",
    "torch": "PyTorch eager",
}
_FALSE = np.array(False)
# Every run passes this one RunOptions: onnxruntime 1.31's own session object runs faster given run
# options than given None (it makes default ones per run then; ~10 % of a 20 µs LSTM step here).
_RUN_OPTIONS = ort.RunOptions()
RUNNERS = ("openvino", "openvino-shared", "custom-op", "auto", "explicit", "floor")
# the model each ortstate runner loads (True: the explicit conversion) and the form it asks for
_FORMS = {
    "custom-op": (False, "custom-op"),
    "auto": (False, "auto"),
    "explicit": (True, "explicit"),
    "floor": (True, ""),
}


class Runner(Protocol):
    """One way of running the model: ``reset`` clears its state, ``step`` runs once."""

    name: str

    def reset(self) -> None: ...

    def step(self, feeds: Feeds) -> object: ...


def session_options(threads: int, model: onnx.ModelProto | None = None) -> ort.SessionOptions:
    """What every ORT session of a benchmark uses: ``threads`` intra-op, 1 inter-op, quiet (as
    ``StatefulSession``'s own, see :func:`~ortstate.runtime.options.quiet_session_options`); and,
    given the model, ortstate's own choices for it (the ones ``StatefulSession`` makes when given no
    options), so that ortstate and the floor run the same ONNX Runtime configuration."""
    options = quiet_session_options()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    meta = read_meta(model) if model is not None else None
    return tune_session_options(options, meta) if meta is not None else options


class _OpenVINO:
    def __init__(self, name: str, workload: Workload, threads: int) -> None:
        import openvino as ov

        config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads, **workload.ov_config}
        self.name = name
        self._request = ov.Core().compile_model(str(workload.xml), "CPU", config).create_infer_request()
        self._shared = name == "openvino-shared"
        self._initial = {n: ov.Tensor(v) for n, v in workload.initial.items()}

    def reset(self) -> None:
        self._request.reset_state()
        for state in self._request.query_state() if self._initial else ():
            if state.name in self._initial:
                state.state = self._initial[state.name]

    def step(self, feeds: Feeds) -> object:
        try:
            return self._request.infer(feeds, share_inputs=self._shared)
        except Exception as exc:  # noqa: BLE001 - openvino raises RuntimeError subclasses
            raise RunError(f"OpenVINO failed to run the model: {' '.join(str(exc).split())}") from None


class _Session:
    def __init__(self, name: str, model: onnx.ModelProto, threads: int, form: str, initial: Feeds) -> None:
        self.name = name
        self._session = StatefulSession(model, session_options(threads, model), form=form)
        self._initial = initial

    def reset(self) -> None:
        self._session.reset_state()
        for variable in self._session.query_state() if self._initial else ():
            if variable.name in self._initial:
                variable.state = self._initial[variable.name]

    def step(self, feeds: Feeds) -> object:
        return self._session.run(None, feeds)


class Floor:
    """The explicit graph with its states fed back by hand: the least a runtime can spend per step.

    Every run goes through onnxruntime's own session object (not its Python wrapper). Once a run's
    states come back with the shapes they went in with (an LSTM stream; any model whose states stop
    growing), they live in two buffer sets bound in two IOBindings, run ``k`` reading set ``k % 2``
    and writing the other (one buffer must never be a run's input and output); fed inputs are
    copied into bound buffers and outputs are left in buffers bound once (returned, not copied).
    Until then, and for growing states (KV caches), each run passes numpy arrays in and out, which
    costs less than binding new outputs every run. ``StatefulSession`` does all this and more (its
    state store, checks, copies of the outputs), so it can approach the floor but not beat it.
    """

    name = "floor"

    def __init__(self, model: onnx.ModelProto, threads: int, mode: str = "auto", initial: Feeds | None = None) -> None:
        meta = read_meta(model)
        if meta is None or meta.form != EXPLICIT:
            raise OrtStateError("the floor runner needs the explicit form")
        if mode not in ("auto", "run"):
            raise ValueError(f"mode must be 'auto' (bind steady states) or 'run', got {mode!r}")
        self.mode = mode
        options = session_options(threads, model)
        options.log_severity_level = 4  # a bound run that no longer fits falls back quietly in step()
        self._session = ort.InferenceSession(model.SerializeToString(), options)
        self._fast = FastRun(self._session)
        self._vars = meta.variables
        self._outputs = [o.name for o in self._session.get_outputs() if o.name not in meta.hidden_outputs]
        self._names = self._outputs + [v.state_output or "" for v in self._vars]
        self._flags = {True: np.array(True), False: _FALSE}
        self._bound: _Bound | None = None
        self._initial = initial or {}
        self.reset()

    @property
    def bound(self) -> bool:
        """True while runs go through the two pre-bound IOBindings."""
        return self._bound is not None

    def reset(self) -> None:
        self._first = True
        self._bound = None
        self._state = {v.id: np.zeros(v.init_shape, np.dtype(v.carrier or v.dtype)) for v in self._vars}
        for v in self._vars:  # a variable set before the first run is initialised: no init computed
            if v.id in self._initial:
                self._state[v.id] = self._initial[v.id].astype(np.dtype(v.carrier or v.dtype))

    def step(self, feeds: Feeds) -> object:
        if self._bound is not None:
            try:
                return self._bound.step(feeds)
            except _Unbound:
                self._state = self._bound.states()
                self._bound = None
        return self._run(feeds)

    def _run(self, feeds: Feeds) -> list[np.ndarray]:
        fed = dict(feeds)
        for v in self._vars:
            state = self._state[v.id]
            if self._first and v.init_dims is not None and v.id not in self._initial:  # shaped by the feeds
                state = np.zeros(initial_shape(v, feeds), state.dtype)
            fed[v.state_input or ""] = state
            if v.init_flag:
                fed[v.init_flag] = self._flags[self._first]
        values = self._fast.run(self._names, fed, _RUN_OPTIONS)
        count = len(self._outputs)
        steady = not self._first and bool(self._vars)
        for v, value in zip(self._vars, values[count:]):
            steady = steady and value.shape == self._state[v.id].shape
            self._state[v.id] = value
        self._first = False
        if steady and self.mode == "auto" and all(a.size for a in values):
            self._bound = _Bound(self._fast, self._vars, self._outputs, feeds, values[:count], self._state)
        return values[:count]


class _Unbound(Exception):
    """The feeds no longer fit the bound buffers."""


class _Bound:
    """The floor's two IOBindings over two state buffer sets (see :class:`Floor`)."""

    def __init__(
        self,
        fast: FastRun,
        variables: tuple[VariableMeta, ...],
        output_names: list[str],
        feeds: Feeds,
        outputs: list[np.ndarray],
        states: dict[str, np.ndarray],
    ) -> None:
        self.vars = variables
        self.inputs = [(name, np.array(value, copy=True, order="C")) for name, value in feeds.items()]
        self.outputs = [np.empty_like(o, order="C") for o in outputs]
        current = [np.array(states[v.id], copy=True, order="C") for v in self.vars]
        self.sets = [current, [np.empty_like(a) for a in current]]
        self.run_bound = fast.run_bound
        self.bindings = []  # the wrappers keep the raw bindings (and so the buffers' binding) alive
        self.raw = []
        for k in (0, 1):
            io, raw = fast.binding()
            for name, buffer in self.inputs:
                io.bind_cpu_input(name, buffer)
            for i, v in enumerate(self.vars):
                if v.init_flag:
                    io.bind_cpu_input(v.init_flag, _FALSE)
                io.bind_cpu_input(v.state_input or "", self.sets[k][i])
                bind_output(io, v.state_output or "", self.sets[1 - k][i])
            for name, buffer in zip(output_names, self.outputs):
                bind_output(io, name, buffer)
            self.bindings.append(io)
            self.raw.append(raw)
        self.k = 0

    def step(self, feeds: Feeds) -> list[np.ndarray]:
        for name, buffer in self.inputs:
            value = feeds[name]
            if value.shape != buffer.shape:
                raise _Unbound
            np.copyto(buffer, value)
        try:
            self.run_bound(self.raw[self.k], _RUN_OPTIONS)
        except Exception:  # noqa: BLE001 - an output changed shape: the plain run redoes it (or raises)
            raise _Unbound from None
        self.k ^= 1
        return self.outputs

    def states(self) -> dict[str, np.ndarray]:
        """The states the next run reads."""
        return {v.id: self.sets[self.k][i].copy() for i, v in enumerate(self.vars)}


def make_runners(
    workload: Workload, threads: int = 1, names: Sequence[str] = RUNNERS
) -> tuple[list[Runner], dict[str, str]]:
    """The runners asked for that can run here, and why each of the others can't.

    The IR is converted once per form; a conversion error skips the ortstate runners and the floor.
    """
    models: dict[bool, onnx.ModelProto | str] = {}
    for explicit in (False, True):
        try:
            models[explicit] = convert(workload.xml, explicit_state=explicit)
        except OrtStateError as exc:
            models[explicit] = " ".join(str(exc).split())
    runners: list[Runner] = []
    skipped: dict[str, str] = {}
    for name in names:
        if name.startswith("openvino"):
            try:
                runners.append(_OpenVINO(name, workload, threads))
            except ImportError:
                skipped[name] = "openvino is not installed"
            continue
        explicit, form = _FORMS[name]
        model = models[explicit]
        if isinstance(model, str):
            skipped[name] = f"conversion failed: {model}"
            continue
        try:
            if name == "floor":
                runners.append(Floor(model, threads, initial=workload.initial))
            else:
                runners.append(_Session(name, model, threads, form, workload.initial))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            text = " ".join(str(exc).split()).replace("[ONNXRuntimeError] : ", "")
            skipped[name] = text if text.startswith("onnxruntime") else f"onnxruntime cannot load it: {text}"
    return runners, skipped

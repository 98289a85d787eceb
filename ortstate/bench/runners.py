"""The runners ``ortstate bench`` puts side by side; each does one model step per ``step`` call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import OrtStateError
from ..model_meta import EXPLICIT, read_meta
from ..runtime.options import tune_session_options
from .workloads import Feeds, Workload

__all__ = ["LABELS", "RUNNERS", "Runner", "make_runners", "session_options"]

LABELS = {
    "openvino": "OpenVINO `infer(feeds)`",
    "openvino-shared": "OpenVINO `infer(feeds, share_inputs=True)`",
    "custom-op": "ortstate custom-op form (Python state ops)",
    "auto": 'ortstate custom-op model, `form="auto"` (rewritten to explicit on load)',
    "explicit": "ortstate explicit form",
    "floor": "floor: bare ORT + IOBinding, no state management",
    "torch": "PyTorch eager",
}
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
    """What every ORT session of a benchmark uses: ``threads`` intra-op, 1 inter-op, quiet; and,
    given the model, ortstate's own choices for it (the ones ``StatefulSession`` makes when given no
    options), so that ortstate and the floor run the same ONNX Runtime configuration."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    meta = read_meta(model) if model is not None else None
    return tune_session_options(options, meta) if meta is not None else options


class _OpenVINO:
    def __init__(self, name: str, xml: Path, threads: int, extra: dict[str, Any]) -> None:
        import openvino as ov

        config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads, **extra}
        self.name = name
        self._request = ov.Core().compile_model(str(xml), "CPU", config).create_infer_request()
        self._shared = name == "openvino-shared"

    def reset(self) -> None:
        self._request.reset_state()

    def step(self, feeds: Feeds) -> object:
        return self._request.infer(feeds, share_inputs=self._shared)


class _Session:
    def __init__(self, name: str, model: onnx.ModelProto, threads: int, form: str) -> None:
        from ..runtime import StatefulSession

        self.name = name
        self._session = StatefulSession(model, session_options(threads, model), form=form)

    def reset(self) -> None:
        self._session.reset_state()

    def step(self, feeds: Feeds) -> object:
        return self._session.run(None, feeds)


class Floor:
    """The explicit graph with its states fed back by hand: the least a runtime can spend per step.

    Static-shape states live in two buffer sets bound once in two IOBindings (run ``k`` reads set
    ``k % 2`` and writes the other: one buffer must never be a run's input and output). Growing
    states (KV caches) are allocated by ORT and bound as the next run's inputs. Fed inputs are
    copied into bound buffers (rebound when their shape changes); user outputs go to preallocated
    buffers of the last shapes seen.
    """

    name = "floor"

    def __init__(self, model: onnx.ModelProto, threads: int, mode: str = "auto") -> None:
        meta = read_meta(model)
        if meta is None or meta.form != EXPLICIT:
            raise OrtStateError("the floor runner needs the explicit form")
        options = session_options(threads, model)
        options.log_severity_level = 4  # a changed output shape is expected and handled in step()
        self._session = ort.InferenceSession(model.SerializeToString(), options)
        self._vars = meta.variables
        self._outputs = [o.name for o in self._session.get_outputs() if o.name not in meta.hidden_outputs]
        self._order = self._outputs + [v.state_output or "" for v in self._vars]
        # the bindings hold the OrtValues, and so the numpy buffers under them, between runs
        self._io = [self._session.io_binding(), self._session.io_binding()]
        for io in self._io:
            for name in self._order:  # the order get_outputs() returns
                io.bind_output(name, "cpu")
        self._static = {v.id for v in self._vars if v.shape is not None and all(isinstance(d, int) for d in v.shape)}
        self._buffers: dict[str, np.ndarray] = {}  # fed inputs and init flags, by input name
        self._pairs: dict[str, np.ndarray] = {}  # the first buffer of each static state
        self._carried: dict[str, ort.OrtValue] = {}  # growing states: the last run's output
        self._out: dict[str, np.ndarray] = {}
        self._flags = {True: np.array(True), False: np.array(False)}
        for v in self._vars:
            if v.id in self._static:
                pair = [np.zeros(v.init_shape, np.dtype(v.carrier or v.dtype)) for _ in range(2)]
                values = [ort.OrtValue.ortvalue_from_numpy(b) for b in pair]
                for p, io in enumerate(self._io):
                    io.bind_ortvalue_input(v.state_input, values[p])
                    io.bind_ortvalue_output(v.state_output, values[1 - p])
                self._pairs[v.id] = pair[0]
            if v.init_flag:
                self._bind(v.init_flag, np.array(True))
        self.reset()
        # Growing states can't live in preallocated buffers; for them IOBinding's per-run
        # bind_output/get_outputs cost more than InferenceSession.run with plain numpy in and out.
        self.mode = mode if mode != "auto" else ("iobinding" if len(self._static) == len(self._vars) else "run")
        self._names = self._outputs + [v.state_output or "" for v in self._vars]

    def _bind(self, name: str, value: np.ndarray) -> None:
        buffer = self._buffers.get(name)
        if buffer is not None and buffer.shape == value.shape and buffer.dtype == value.dtype:
            np.copyto(buffer, value)
            return
        buffer = self._buffers[name] = np.array(value, copy=True, order="C")
        bound = ort.OrtValue.ortvalue_from_numpy(buffer)
        for io in self._io:
            io.bind_ortvalue_input(name, bound)

    def reset(self) -> None:
        self._parity, self._first = 0, True
        self._state = {v.id: np.zeros(v.init_shape, np.dtype(v.carrier or v.dtype)) for v in self._vars}
        for v in self._vars:
            if v.id in self._static:
                self._pairs[v.id].fill(0)
            else:
                zeros = np.zeros(v.init_shape, np.dtype(v.carrier or v.dtype))
                self._carried[v.id] = ort.OrtValue.ortvalue_from_numpy(zeros)
            if v.init_flag:
                self._buffers[v.init_flag][...] = True

    def _preallocate(self, values: Sequence[ort.OrtValue] | None) -> None:
        """User outputs into buffers shaped like ``values`` (None: let ORT allocate them again)."""
        for i, name in enumerate(self._outputs):
            if values is None:
                self._out.pop(name, None)
                for io in self._io:
                    io.bind_output(name, "cpu")
                continue
            self._out[name] = np.empty_like(values[i].numpy())
            bound = ort.OrtValue.ortvalue_from_numpy(self._out[name])
            for io in self._io:
                io.bind_ortvalue_output(name, bound)

    def step(self, feeds: Feeds) -> object:
        if self.mode == "run":
            return self._run(feeds)
        for name, value in feeds.items():
            self._bind(name, value)
        io = self._io[self._parity]
        growing = [v for v in self._vars if v.id not in self._static]
        for v in growing:
            io.bind_ortvalue_input(v.state_input, self._carried[v.id])
            io.bind_output(v.state_output, "cpu")
        try:
            self._session.run_with_iobinding(io)
        except Exception:  # an output's shape changed (prefill -> decode): allocate anew and rerun
            if not self._out:
                raise
            self._preallocate(None)
            self._session.run_with_iobinding(io)
        values = io.get_outputs() if growing or not self._out else []
        for v in growing:
            self._carried[v.id] = values[self._order.index(v.state_output or "")]
        if self._out:
            results = [self._out[name] for name in self._outputs]
        else:
            results = [values[i].numpy() for i in range(len(self._outputs))]
            self._preallocate(values)
        if self._first:
            self._first = False
            for v in self._vars:
                if v.init_flag:
                    self._buffers[v.init_flag][...] = False
        self._parity ^= 1
        return results

    def _run(self, feeds: Feeds) -> list[np.ndarray]:
        fed = dict(feeds)
        for v in self._vars:
            fed[v.state_input or ""] = self._state[v.id]
            if v.init_flag:
                fed[v.init_flag] = self._flags[self._first]
        values = self._session.run(self._names, fed)
        count = len(self._outputs)
        for v, value in zip(self._vars, values[count:]):
            self._state[v.id] = value
        self._first = False
        return values[:count]


def make_runners(
    workload: Workload, threads: int = 1, names: Sequence[str] = RUNNERS
) -> tuple[list[Runner], dict[str, str]]:
    """The runners asked for that can run here, and why each of the others can't.

    The IR is converted once per form; a conversion error skips the ortstate runners and the floor.
    """
    from ..convert import convert

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
                runners.append(_OpenVINO(name, workload.xml, threads, workload.ov_config))
            except ImportError:
                skipped[name] = "openvino is not installed"
            continue
        explicit, form = _FORMS[name]
        model = models[explicit]
        if isinstance(model, str):
            skipped[name] = f"conversion failed: {model}"
            continue
        try:
            runners.append(Floor(model, threads) if name == "floor" else _Session(name, model, threads, form))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            text = " ".join(str(exc).split()).replace("[ONNXRuntimeError] : ", "")
            skipped[name] = text if text.startswith("onnxruntime") else f"onnxruntime cannot load it: {text}"
    return runners, skipped

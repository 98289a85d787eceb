"""Step OpenVINO and ortstate side by side on one IR and compare every output and variable.

OpenVINO is the reference and is imported only when needed (``pip install 'ortstate[verify]'``).
The run: N steps, a reset, N more steps. ortstate's reset is ``reset_state()``; OpenVINO's side of
the reset is a freshly compiled model, because its CPU plugin's own ``reset_state()`` leaves some
ShapeOf/Broadcast-initialised caches stale (seen with ``models/kv_cache_toy`` on 2026.4).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx

from .errors import OrtStateError, RunError
from .ir import Graph, Layer, parse_partial_shape, read_ir
from .model_meta import CUSTOM_OP, EXPLICIT, read_meta

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "OV_CONFIG",
    "Check",
    "FormResult",
    "InputError",
    "InputSpec",
    "OpenVINOUnavailable",
    "VerifyResult",
    "compare",
    "input_specs",
    "load_openvino",
    "random_inputs",
    "verify",
]

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-4
DEFAULT_DIM = 4
# f32 everywhere: the CPU plugin may otherwise compute in bf16, keep KV caches in f16 and quantize
# activations on the fly for compressed weights (MODELS.md).
OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
INSTALL_HINT = "pip install 'ortstate[verify]'"


class OpenVINOUnavailable(OrtStateError):
    """``openvino`` (the reference runtime) is not installed."""


class InputError(OrtStateError):
    """Inputs or shapes asked for do not fit the model's Parameters."""


def load_openvino() -> ModuleType:
    """Import openvino, or raise :class:`OpenVINOUnavailable` saying how to install it."""
    try:
        return importlib.import_module("openvino")
    except ImportError:
        raise OpenVINOUnavailable(f"verify needs OpenVINO, which is not installed: {INSTALL_HINT}") from None


@dataclass(frozen=True)
class InputSpec:
    """A Parameter as the user feeds it: name, numpy dtype, dims (None where dynamic; None rank)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...] | None

    def shape(self, batch: int, override: Sequence[int] | None = None) -> tuple[int, ...]:
        """Concrete shape: ``override``, else dynamic dims as ``batch`` (first) or ``DEFAULT_DIM``."""
        dims = self.dims
        if override is not None:
            fits = dims is None or (len(override) == len(dims) and all(d in (None, n) for d, n in zip(dims, override)))
            if not fits:
                shown = "[" + ",".join("?" if d is None else str(d) for d in dims or ()) + "]"
                raise InputError(f"input '{self.name}': shape {list(override)} does not fit {shown}")
            return tuple(override)
        if dims is None:
            raise InputError(f"input '{self.name}' has a dynamic rank: give a shape (--shape {self.name}=D0,D1,...)")
        return tuple(d if d is not None else (batch if i == 0 else DEFAULT_DIM) for i, d in enumerate(dims))


def _tensor_name(layer: Layer) -> str:
    # The converter names graph inputs as OpenVINO's get_any_name() does.
    names = layer.outputs[0].names if layer.outputs else ()
    return min(names) if names else layer.name


def input_specs(graph: Graph) -> list[InputSpec]:
    specs = []
    for layer in graph.parameters:
        etype = layer.outputs[0].element_type if layer.outputs else None
        if etype is None or etype.dtype is None:
            raise InputError(f"{graph.source}: {layer.describe()}: cannot generate inputs of element type {etype}")
        shape = parse_partial_shape(layer.attrs.get("shape", "..."))
        dims = None if shape.dims is None else tuple(d.lo if d.is_static else None for d in shape.dims)
        specs.append(InputSpec(_tensor_name(layer), etype.dtype, dims))
    return specs


def random_inputs(
    specs: Sequence[InputSpec],
    rng: np.random.Generator,
    *,
    batch: int = 2,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, np.ndarray]:
    """Floats ~ N(0, 1); integers in ``[0, batch)`` (valid as indices along the batch axis); bools 50/50."""
    feeds = {}
    for spec in specs:
        shape = spec.shape(batch, (shapes or {}).get(spec.name))
        if spec.dtype.kind == "b":
            value = rng.random(shape) < 0.5
        elif spec.dtype.kind in "iu":
            value = rng.integers(0, max(batch, 1), size=shape)
        else:
            value = rng.standard_normal(shape)
        feeds[spec.name] = np.asarray(value).astype(spec.dtype)
    return feeds


@dataclass(frozen=True)
class Check:
    """One compared value. ``step`` counts from 1 within ``phase`` (0 before the reset, 1 after)."""

    phase: int
    step: int
    kind: str  # "output" | "state"
    name: str
    error: float
    ok: bool
    note: str = ""


@dataclass
class FormResult:
    form: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def max_error(self, kind: str) -> float:
        return max((c.error for c in self.checks if c.kind == kind), default=0.0)


@dataclass
class VerifyResult:
    source: str
    openvino_version: str
    steps: int
    inputs: dict[str, tuple[str, tuple[int, ...]]]  # name -> (dtype, shape) of the first step
    forms: list[FormResult]
    rtol: float
    atol: float

    @property
    def ok(self) -> bool:
        return bool(self.forms) and all(f.ok for f in self.forms)


def compare(got: Any, want: Any, rtol: float, atol: float) -> tuple[float, bool, str]:
    """(max abs error, within tolerance, why not). NaNs match NaNs; integers and bools must be equal."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf"), False, f"shape {list(got.shape)}, OpenVINO {list(want.shape)}"
    if got.dtype != want.dtype:
        return float("inf"), False, f"dtype {got.dtype}, OpenVINO {want.dtype}"
    if got.size == 0:
        return 0.0, True, ""
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    diff = np.where(both_nan, 0.0, np.abs(g - w))
    diff = np.where(np.isnan(diff), np.inf, diff)
    error = float(diff.max())
    exact = want.dtype.kind in "biu"  # bfloat16 & co. (ml_dtypes) have kind "V": compared as floats
    ok = error == 0.0 if exact else bool(np.all(diff <= atol + rtol * np.abs(np.where(both_nan, 0.0, w))))
    return error, ok, ""


class _Reference:
    """OpenVINO's trajectory: outputs and variables after every step of both phases."""

    def __init__(self, ov: ModuleType, xml: Path, bin_path: Path | None) -> None:
        self._core = ov.Core()
        try:
            self._model = self._core.read_model(str(xml), str(bin_path) if bin_path else None)
        except Exception as exc:  # noqa: BLE001 - openvino raises RuntimeError subclasses
            raise OrtStateError(f"{xml}: OpenVINO cannot read the model: {_last_line(exc)}") from None
        self.output_names = [o.get_any_name() for o in self._model.outputs]
        # OpenVINO's CPU plugin hands a scalar variable's state back as shape [1] (outputs read
        # from it stay scalars): such states are compared as the scalars the model declares.
        shapes = {v.info.variable_id: v.info.data_shape for v in self._model.get_variables()}
        self.scalars = {vid for vid, shape in shapes.items() if shape.rank.is_static and len(shape) == 0}

    def request(self) -> Any:
        try:
            compiled = self._core.compile_model(self._model, "CPU", OV_CONFIG)
        except Exception:  # noqa: BLE001 - an older OpenVINO may not know a key; the hint is the one that matters
            try:
                compiled = self._core.compile_model(self._model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            except Exception as exc:  # noqa: BLE001
                raise OrtStateError(f"OpenVINO cannot compile the model: {_last_line(exc)}") from None
        return compiled.create_infer_request()

    def step(self, request: Any, feeds: Mapping[str, np.ndarray]) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        try:
            result = request.infer(dict(feeds))
        except Exception as exc:  # noqa: BLE001
            raise OrtStateError(f"OpenVINO failed to run the model: {_last_line(exc)}") from None
        outputs = [np.array(result[o]) for o in request.model_outputs]
        states = {s.name: np.array(s.state.data) for s in request.query_state()}
        for name in self.scalars.intersection(states):
            if states[name].size == 1:
                states[name] = states[name].reshape(())
        return outputs, states


def verify(
    xml: str | os.PathLike[str],
    *,
    steps: int = 3,
    seed: int = 0,
    forms: Sequence[str] = (CUSTOM_OP,),
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    batch: int = 2,
    shapes: Mapping[str, Sequence[int]] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    onnx_model: onnx.ModelProto | None = None,
    bin_path: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> VerifyResult:
    """Compare ortstate with OpenVINO on ``xml`` for ``steps`` steps, a reset and ``steps`` more.

    Args:
        forms: ``custom-op`` and/or ``explicit``, each run as itself (a custom-op model through its
            Python state ops); ignored when ``onnx_model`` is given: it runs as written and, a
            custom-op model, also rewritten into the explicit form (``StatefulSession``'s default).
        inputs: fixed values for some inputs (the same every step); the others are random.
        onnx_model: compare this converted model instead of converting ``xml``.

    Raises:
        OpenVINOUnavailable, and any ``OrtStateError`` of reading, converting or running.
    """
    from . import StatefulSession, convert

    if steps < 1:
        raise OrtStateError(f"steps must be at least 1, got {steps}")
    ov = load_openvino()
    say = progress or (lambda _msg: None)
    xml = Path(xml)
    bin_file = Path(bin_path) if bin_path is not None else None
    feeds = _make_feeds(input_specs(read_ir(xml, bin_file)), 2 * steps, seed, batch, shapes, inputs or {})

    say(f"running OpenVINO {ov.get_version().split('-')[0]} on {xml.name}")
    reference = _Reference(ov, xml, bin_file)
    trajectory = []
    for phase in range(2):
        request = reference.request()  # a fresh compile is OpenVINO's reset (see the module docstring)
        trajectory.extend(reference.step(request, f) for f in feeds[phase * steps : (phase + 1) * steps])

    # Each converted form runs as itself (a custom-op model through its Python state ops). A given
    # model runs as written and, if it is a custom-op model, also as StatefulSession runs it by
    # default: rewritten into the explicit form.
    runs: list[tuple[onnx.ModelProto | None, str]] = [(None, f) for f in forms]
    if onnx_model is not None:
        try:
            meta = read_meta(onnx_model)
        except ValueError:
            meta = None  # StatefulSession says what is wrong with it
        own = meta.form if meta and meta.variables else "auto"
        runs = [(onnx_model, own)] + ([(onnx_model, "auto")] if own == CUSTOM_OP else [])
    results = []
    for model, form in runs:
        if model is None:
            say(f"converting {xml.name} ({form} form)")
            model = convert(xml, explicit_state=form == EXPLICIT, bin_path=bin_file)
        session = StatefulSession(model, form=form)
        label = session.form if session.form == session.model_form else f"{session.form} (rewritten)"
        say(f"running ortstate ({label} form)")
        results.append(_run_form(session, label, reference.output_names, feeds, trajectory, steps, rtol, atol))
    first = {name: (str(value.dtype), tuple(value.shape)) for name, value in feeds[0].items()}
    return VerifyResult(str(xml), ov.get_version(), steps, first, results, rtol, atol)


def _make_feeds(
    specs: list[InputSpec],
    count: int,
    seed: int,
    batch: int,
    shapes: Mapping[str, Sequence[int]] | None,
    fixed: Mapping[str, np.ndarray],
) -> list[dict[str, np.ndarray]]:
    by_name = {s.name: s for s in specs}
    for name, value in fixed.items():
        spec = by_name.get(name)
        if spec is None:
            raise InputError(f"unknown input '{name}' (inputs: {', '.join(by_name)})")
        if np.asarray(value).dtype != spec.dtype:
            raise InputError(f"input '{name}': got {np.asarray(value).dtype} values, the model takes {spec.dtype}")
    rng = np.random.default_rng(seed)
    random_specs = [s for s in specs if s.name not in fixed]
    feeds = []
    for _ in range(count):
        step = random_inputs(random_specs, rng, batch=batch, shapes=shapes)
        step.update({name: np.asarray(value) for name, value in fixed.items()})
        feeds.append({s.name: step[s.name] for s in specs})
    return feeds


def _run_form(
    session: Any,
    label: str,
    ov_names: list[str],
    feeds: list[dict[str, np.ndarray]],
    trajectory: list[tuple[list[np.ndarray], dict[str, np.ndarray]]],
    steps: int,
    rtol: float,
    atol: float,
) -> FormResult:
    result = FormResult(label)
    names = [o.name for o in session.get_outputs()]
    order = _pair_outputs(names, ov_names)
    for index, (step_feeds, (want_out, want_states)) in enumerate(zip(feeds, trajectory)):
        phase, step = divmod(index, steps)
        if index == steps:
            session.reset_state()
        try:
            got_out = session.run(None, step_feeds)
        except RunError as exc:
            when = f"step {step + 1} {'after' if phase else 'before'} the reset"
            raise RunError(f"ortstate ({label} form), {when}: {exc}") from None
        for name, got, i in zip(names, got_out, order):
            result.checks.append(Check(phase, step + 1, "output", name, *compare(got, want_out[i], rtol, atol)))
        got_states = {v.name: v.state for v in session.query_state()}
        for name in sorted(set(got_states) | set(want_states)):
            if name in got_states and name in want_states:
                error, ok, note = compare(got_states[name], want_states[name], rtol, atol)
            else:
                error, ok = float("inf"), False
                note = f"missing in {'ortstate' if name not in got_states else 'OpenVINO'}"
            result.checks.append(Check(phase, step + 1, "state", name, error, ok, note))
    return result


def _pair_outputs(names: list[str], ov_names: list[str]) -> list[int]:
    """For each ONNX output, the index of OpenVINO's output it is compared with."""
    if len(names) != len(ov_names):
        raise OrtStateError(
            f"the ONNX model has {len(names)} outputs ({', '.join(names)}), "
            f"OpenVINO {len(ov_names)} ({', '.join(ov_names)})"
        )
    if sorted(names) == sorted(ov_names):
        return [ov_names.index(n) for n in names]
    return list(range(len(names)))  # renamed outputs: rely on the Result order


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__

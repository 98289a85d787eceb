"""Step OpenVINO and ortstate side by side on one IR and compare every output and variable.

OpenVINO is the reference (:mod:`ortstate.verify.reference`), imported only when needed
(``pip install 'ortstate[verify]'``, ``'.[verify]'`` in a checkout). The run: N steps, a reset, N
more steps. ortstate's reset is ``reset_state()``; OpenVINO's is a freshly compiled model (see
:mod:`ortstate.verify.reference`).

The inputs follow the model's roles: a stateful decoder (an optimum-intel LLM) is fed as ``generate``
feeds it, by the same :class:`~ortstate.decoders.feeds.FeedRules` (a random prompt, then one random
token per step, with the mask, positions and ``cache_position`` the rules make); any other model
gets random values every step (see :mod:`ortstate.decoders.synthetic`).
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

from ..convert import convert_graph
from ..errors import OpenVINOUnavailable, OrtStateError, RunError
from ..extras import install_hint
from ..ir import Graph, read_ir
from ..meta import CUSTOM_OP, EXPLICIT, read_meta
from ..progress import task
from ..runtime import StatefulSession
from .inputs import VerifyInputs
from .reference import Reference

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "Check",
    "FormResult",
    "VerifyResult",
    "compare",
    "load_openvino",
    "verify",
]

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-4
INSTALL_HINT = install_hint("verify")


def load_openvino() -> ModuleType:
    """Import openvino, or raise :class:`OpenVINOUnavailable` saying how to install it."""
    try:
        return importlib.import_module("openvino")
    except ImportError:
        raise OpenVINOUnavailable(f"verify needs OpenVINO, which is not installed: {INSTALL_HINT}") from None


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
    feeding: str = ""  # how the inputs were made, e.g. "decoder: a 4-token prompt, then 1 token per step"

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


def verify(
    xml: str | os.PathLike[str],
    *,
    steps: int = 3,
    seed: int = 0,
    forms: Sequence[str] = (EXPLICIT,),
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    batch: int = 2,
    shapes: Mapping[str, Sequence[int]] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    onnx_model: onnx.ModelProto | None = None,
    bin_path: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> VerifyResult:
    """Compare ortstate with OpenVINO on ``xml`` for ``steps`` steps, a reset and ``steps`` more.

    Args:
        forms: ``custom-op`` and/or ``explicit``, each run as itself (a custom-op model through its
            Python state ops); by default the explicit form, the one ``StatefulSession``, ``run``
            and ``generate`` run an IR in. Ignored when ``onnx_model`` is given: it runs as written
            and, a custom-op model, also rewritten into the explicit form (``StatefulSession``'s default).
        batch: the first dim of inputs where it is dynamic (a decoder's batch).
        shapes: whole shapes of some inputs. For a decoder, ``input_ids`` (or ``inputs_embeds``)
            sets the batch and the prompt length, ``encoder_hidden_states`` the encoder's; the
            other inputs are made by the feeding rules and cannot be shaped.
        inputs: fixed values for some inputs (the same every step); the others are generated.
        onnx_model: compare this converted model instead of converting ``xml``.
        note: called once, before anything runs, with what a decoder's feeding rules had to assume
            or read from the graph because no ``config.json`` beside the IR said it (their notes,
            joined), if anything. A run that fails on inputs a rule had to guess says what would help.

    Raises:
        OpenVINOUnavailable, and any ``OrtStateError`` of reading, converting or running.
    """
    if steps < 1:
        raise OrtStateError(f"steps must be at least 1, got {steps}")
    ov = load_openvino()
    say = progress or (lambda _msg: None)
    xml, bin_file = Path(xml), (Path(bin_path) if bin_path is not None else None)
    graph = read_ir(xml, bin_file)
    maker = VerifyInputs(graph, xml, batch, shapes or {}, inputs or {})
    remedy = maker.rules.remedy if maker.rules is not None else ""
    if note is not None and maker.rules is not None and maker.rules.notes:
        note("; ".join(maker.rules.notes))
    rng = np.random.default_rng(seed)
    feeds = maker.phase(rng, steps) + maker.phase(rng, steps)
    say(f"running OpenVINO {ov.get_version().split('-')[0]} on {xml.name}")
    reference = Reference(ov, xml, bin_file, graph, maker.initial, remedy)
    trajectory = _trajectory(reference, feeds, steps)
    results = []
    for model, form in _planned_runs(forms, onnx_model):
        session = _session(graph, xml, model, form, say)
        try:
            results.append(_run_form(session, reference.output_names, feeds, trajectory, (rtol, atol), maker.initial))
        except RunError as exc:
            raise RunError(f"{exc}; {remedy}") if remedy else exc from None
    first = {name: (str(value.dtype), tuple(value.shape)) for name, value in feeds[0].items()}
    return VerifyResult(str(xml), ov.get_version(), steps, first, results, rtol, atol, maker.feeding)


def _trajectory(
    reference: Reference, feeds: list[dict[str, np.ndarray]], steps: int
) -> list[tuple[list[np.ndarray], dict[str, np.ndarray]]]:
    """OpenVINO's outputs and variables after each step of both phases."""
    trajectory = []
    with task("OpenVINO's steps", total=2 * steps) as bar:
        for phase in range(2):
            request = reference.request()  # a fresh compile is OpenVINO's reset (see verify.reference)
            for f in feeds[phase * steps : (phase + 1) * steps]:
                trajectory.append(reference.step(request, f))
                bar.update()
    return trajectory


def _session(graph: Graph, xml: Path, model: onnx.ModelProto | None, form: str, say: Callable[[str], None]) -> Any:
    """The session of one run: ``model`` (None: the IR converted to ``form``) in ``form``."""
    if model is None:
        say(f"converting {xml.name} ({form} form)")
        model = convert_graph(graph, explicit_state=form == EXPLICIT)
    session = StatefulSession(model, form=form)
    say(f"running ortstate ({_label(session)} form)")
    return session


def _label(session: Any) -> str:
    return session.form if session.form == session.model_form else f"{session.form} (rewritten)"


def _planned_runs(forms: Sequence[str], onnx_model: onnx.ModelProto | None) -> list[tuple[onnx.ModelProto | None, str]]:
    """``(model, form)`` of each ortstate run; None: the IR converted to that form.

    Each converted form runs as itself (a custom-op model through its Python state ops). A given
    model runs as written and, if it is a custom-op model, also as StatefulSession runs it by
    default: rewritten into the explicit form.
    """
    if onnx_model is None:
        return [(None, f) for f in forms]
    try:
        meta = read_meta(onnx_model)
    except ValueError:
        meta = None  # StatefulSession says what is wrong with it
    own = meta.form if meta and meta.variables else "auto"
    return [(onnx_model, own)] + ([(onnx_model, "auto")] if own == CUSTOM_OP else [])


def _run_form(
    session: Any,
    ov_names: list[str],
    feeds: list[dict[str, np.ndarray]],
    trajectory: list[tuple[list[np.ndarray], dict[str, np.ndarray]]],
    tolerance: tuple[float, float],
    initial: Mapping[str, np.ndarray],
) -> FormResult:
    """Run ``session`` through both phases (half of ``feeds`` each) and compare with ``trajectory``."""
    steps, (rtol, atol) = len(feeds) // 2, tolerance
    label = _label(session)
    result = FormResult(label)
    names = [o.name for o in session.get_outputs()]
    order = _pair_outputs(names, ov_names)
    for index, (step_feeds, (want_out, want_states)) in enumerate(zip(feeds, trajectory)):
        phase, step = divmod(index, steps)
        if index == steps:
            session.reset_state()
        if index % steps == 0:
            for variable in session.query_state():
                if variable.name in initial:
                    variable.state = initial[variable.name]
        try:
            got_out = session.run(None, step_feeds)
        except RunError as exc:
            when = f"step {step + 1} {'after' if phase else 'before'} the reset"
            raise RunError(f"ortstate ({label} form), {when}: {exc}") from None
        for name, got, i in zip(names, got_out, order):
            result.checks.append(Check(phase, step + 1, "output", name, *compare(got, want_out[i], rtol, atol)))
        got_states = {v.name: v.state for v in session.query_state()}
        for name in [*got_states, *(n for n in want_states if n not in got_states)]:
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

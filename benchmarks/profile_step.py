"""Where the time of one step goes, in the custom-op and explicit forms of a model (the demo LSTM).

Three views:

- **Layers by subtraction** (no profiler running): the same step timed as (a) the floor, (b) bare
  ``InferenceSession.run`` on the explicit graph with states as numpy feeds, (c) bare
  ``InferenceSession.run`` on the custom-op graph a session runs (state ops fused; PyOps included,
  no StatefulSession), (d)/(e) ``StatefulSession.run`` of each form. (c) - (b) over the PyOp count
  is the cost of one PyOp call; (d) - (c) and (e) - (b) are the Python in ortstate's ``run()``.
- **cProfile** of ``StatefulSession.run`` (custom-op form): the Python functions, per step.
- **ORT's own profiler** (``enable_profiling``): each graph node's kernel time, per step.
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime_extensions import get_library_path

import ortstate
from ortstate.meta import CONTRIB_DOMAIN, read_meta
from ortstate.passes import fusable, fuse_state_ops
from ortstate.runtime import pyops
from ortstate.runtime.store import StateStore
from ortstate.timing import model_workload, session_options
from ortstate.timing.runners import Floor


def _median_us(step: Any, feeds: list[dict[str, np.ndarray]], repeats: int) -> float:
    """Median µs per call over ``repeats`` passes of ``feeds``; best pass median (noise is one-sided)."""
    medians = []
    for _ in range(repeats):
        times = np.empty(len(feeds))
        for i, f in enumerate(feeds):
            start = time.perf_counter_ns()
            step(f)
            times[i] = time.perf_counter_ns() - start
        medians.append(float(np.median(times)) / 1e3)
    return min(medians)


def layers(xml: Path, steps: int = 2000, repeats: int = 5) -> dict[str, Any]:
    """The subtraction view; all single-threaded, the variants interleaved pass by pass.

    The bare custom-op run is the graph a custom-op session runs (its state ops fused, one read and
    one write per dtype) with a request store of its own whose variables hold the workload's start
    values: every state op does what it does in a session (reads the values, stages the writes),
    and nothing is committed, so each step reads the same values, as the bare explicit run is fed.
    """
    workload = model_workload(xml, steps)
    feeds = workload.steps
    custom_model = ortstate.convert(xml)
    explicit_model = ortstate.convert(xml, explicit_state=True)
    custom = ortstate.StatefulSession(custom_model, session_options(1, custom_model), form="custom-op")
    explicit = ortstate.StatefulSession(explicit_model, session_options(1, explicit_model))
    for session in (custom, explicit):
        for variable in session.query_state():
            if variable.name in workload.initial:
                variable.state = workload.initial[variable.name]
    meta, custom_meta = read_meta(explicit_model), read_meta(custom_model)
    assert meta is not None and custom_meta is not None
    start = {
        v.id: workload.initial.get(v.id, np.zeros(v.init_shape, np.dtype(v.carrier or v.dtype))) for v in meta.variables
    }
    floor = Floor(explicit_model, 1, initial=workload.initial)
    bare = ort.InferenceSession(explicit_model.SerializeToString(), session_options(1, explicit_model))
    fused = onnx.ModelProto()
    fused.CopyFrom(custom_model)
    if fusable(fused):
        fuse_state_ops(fused, custom_meta)
    options = session_options(1, custom_model)
    options.register_custom_ops_library(get_library_path())
    bare_custom = ort.InferenceSession(fused.SerializeToString(), options)
    store = StateStore(custom_meta.variables)
    for var_id, value in start.items():
        store.set(var_id, value)
    key = pyops.register_store(store)
    states = {v.state_input: start[v.id] for v in meta.variables}
    flags = {v.init_flag: np.array(False) for v in meta.variables if v.init_flag}
    fixed = {custom_meta.request_input or "": np.array(key, np.int64), **flags}
    runs = {
        "floor (IOBinding)": floor.step,
        "bare run, explicit graph": lambda f: bare.run(None, {**f, **states, **flags}),
        "bare run, custom-op graph": lambda f: bare_custom.run(None, {**f, **fixed}),
        "StatefulSession.run, custom-op": lambda f: custom.run(None, f),
        "StatefulSession.run, explicit": lambda f: explicit.run(None, f),
    }
    for run in runs.values():  # warm up
        _median_us(run, feeds[:200], 1)
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            best[name] = min(best[name], _median_us(run, feeds, 1))
    pyops.unregister_store(key)
    calls = sum(1 for n in fused.graph.node if n.domain == CONTRIB_DOMAIN)
    return {
        "us": {k: round(v, 2) for k, v in best.items()},
        "pyops_per_step": calls,
        "per_pyop_us": round((best["bare run, custom-op graph"] - best["bare run, explicit graph"]) / calls, 2),
        "explicit_over_floor_us": round(best["StatefulSession.run, explicit"] - best["floor (IOBinding)"], 2),
        "custom_over_floor_us": round(best["StatefulSession.run, custom-op"] - best["floor (IOBinding)"], 2),
    }


def cprofile(xml: Path, steps: int = 3000, top: int = 14) -> dict[str, Any]:
    """cProfile of ``StatefulSession.run`` on the custom-op form: the top functions by own time
    (``text``), and the shares of the step spent in ORT's C++ ``run`` (PyOps excluded), in the
    PyOps (the onnxruntime-extensions hook, everything under it) and elsewhere (ortstate's Python)."""
    feeds = model_workload(xml, steps).steps
    model = ortstate.convert(xml)
    session = ortstate.StatefulSession(model, session_options(1, model), form="custom-op")
    for f in feeds[:200]:
        session.run(None, f)
    profiler = cProfile.Profile()
    profiler.enable()
    for f in feeds:
        session.run(None, f)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    rows = []
    for (file, line, func), (calls, _, own, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = func if file == "~" else f"{Path(file).name}:{line}({func})"
        rows.append((own, cum, calls, where))
    rows.sort(reverse=True)
    lines = [f"{'own µs/step':>12} {'cum µs/step':>12} {'calls/step':>10}  function", "-" * 78]
    for own, cum, calls, where in rows[:top]:
        lines.append(f"{own / steps * 1e6:12.2f} {cum / steps * 1e6:12.2f} {calls / steps:10.2f}  {where[:60]}")
    total = max(cum for _, cum, _, where in rows if where.endswith("(run)") and "request.py" in where)
    hook = sum(cum for _, cum, _, where in rows if where.endswith("(_hook)"))
    ort_c = sum(own for own, _, _, where in rows if "onnxruntime_pybind11_state" in where)
    shares = {"ort_cpp": ort_c / total, "pyops": hook / total, "python": 1 - (ort_c + hook) / total}
    return {"text": "\n".join(lines), "profiled_us": total / steps * 1e6, "shares": shares}


def ort_nodes(xml: Path, steps: int = 1000) -> list[tuple[str, float, float]]:
    """ORT's profiler on the custom-op form: (node type, µs per step, calls per step), heaviest first."""
    feeds = model_workload(xml, steps).steps
    with tempfile.TemporaryDirectory() as tmp:
        model = ortstate.convert(xml)
        options = session_options(1, model)
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "step")
        session = ortstate.StatefulSession(model, options, form="custom-op")
        for f in feeds:
            session.run(None, f)
        trace = json.loads(Path(session.loaded.session.end_profiling()).read_text(encoding="utf-8"))
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for event in trace:
        name, args = event.get("name", ""), event.get("args", {})
        if event.get("cat") == "Node" and name.endswith("_kernel_time"):
            key = args.get("op_name", "?")
        elif event.get("cat") == "Session" and name == "model_run":
            key = "(whole run: model_run)"
        else:
            continue
        totals[key][0] += float(event.get("dur", 0))
        totals[key][1] += 1
    rows = [(k, v[0] / steps, v[1] / steps) for k, v in totals.items()]
    return sorted(rows, key=lambda r: -r[1])

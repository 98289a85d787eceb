"""Per-step latency of a stateful IR in OpenVINO and in ortstate, side by side (``ortstate bench``).

Runners, each doing one model step per call (ONNX Runtime sessions: ``intra_op_num_threads=T``,
``inter_op_num_threads=1``; OpenVINO: ``INFERENCE_NUM_THREADS=T``, f32):

- ``openvino``: OpenVINO's own stateful ``InferRequest.infer(feeds)``, as its docs write it.
- ``openvino-shared``: the same with ``share_inputs=True`` (OpenVINO's fast path; outputs still copied).
- ``custom-op``: :class:`~ortstate.StatefulSession` running the custom-op form's Python state ops.
- ``auto``: the same custom-op model with the session's default ``form="auto"``: rewritten on load
  into the explicit form (what a user gets without asking).
- ``explicit``: :class:`~ortstate.StatefulSession` on the explicit form.
- ``floor``: the explicit form's graph in a bare ``InferenceSession`` (onnxruntime's own session
  object), the states plain inputs/outputs carried by two ping-pong buffer sets bound once their
  shapes are steady, init flags False after the first run: the same ONNX compute with no state
  management at all, the leanest loop there is (see :class:`~ortstate.timing.runners.Floor`).

Ratios to OpenVINO are against its fastest way here (the lower p50 of its two runners), with the
plain ``infer(feeds)`` beside it. A stateful decoder is fed as ``generate`` feeds it (the same
feeding rules); see :func:`~ortstate.timing.workloads.model_workload`.

Each round resets every runner, runs the workload's prefill untimed, then times each step; the
runners' order alternates between rounds (ABC, CBA, ...) so drift falls on all of them alike.
OpenVINO and matplotlib are imported lazily: without OpenVINO its rows are skipped.

Typical use::

    workload = model_workload("model.xml", steps=200)
    runners, skipped = make_runners(workload, threads=1)
    result = measure(workload, runners, rounds=5, skipped=skipped)
    print(markdown_table(result))
"""

from .measure import BenchResult, RunnerStats, measure
from .report import (
    cpu_name,
    document,
    isa_flags,
    machine_info,
    markdown_table,
    plot_figure,
    plot_results,
    plot_unavailable,
)
from .runners import LABELS, RUNNERS, Runner, make_runners, session_options
from .workloads import Feeds, Workload, max_positions, model_label, model_workload, weight_precision

__all__ = [
    "LABELS",
    "RUNNERS",
    "BenchResult",
    "Feeds",
    "Runner",
    "RunnerStats",
    "Workload",
    "cpu_name",
    "document",
    "isa_flags",
    "machine_info",
    "make_runners",
    "markdown_table",
    "max_positions",
    "model_label",
    "measure",
    "model_workload",
    "plot_figure",
    "plot_results",
    "plot_unavailable",
    "session_options",
    "weight_precision",
]

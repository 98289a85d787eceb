"""A converted recurrent model against the same network exported natively, both in bare ONNX Runtime.

OpenVINO's LSTM/GRU/RNN layouts are batch-major where ONNX's are sequence-major, and its PyTorch
frontend computes each layer's sequence lengths at run time: the converter's graph starts with
Transposes and shape arithmetic a native export has not. :func:`native_export` writes the graph
``torch.onnx.export`` (TorchScript exporter, torch 2.13) writes for the same ``nn.LSTM``/``GRU``/``RNN``
stack: one Transpose in (batch-first), one recurrent node per layer on ``Slice``\\ s of the initial
states without ``sequence_lens``, a ``Squeeze`` between layers, one Transpose out, the last states
concatenated. It takes the converted model's own weights (already in ONNX's gate order) and its
input and output names, so one driver runs both and their outputs must agree. Checked op for op
against a real ``torch.onnx.export(nn.LSTM(8, 16, 2, batch_first=True), ..., dynamo=False)``.

:func:`compare` runs both as the floor does (:class:`ortstate.timing.runners.Floor`: the explicit
form's graph in a bare ``InferenceSession``, states in two pre-bound IOBindings), in alternating
rounds.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

import ortstate
from ortstate.meta import read_meta, write_meta
from ortstate.timing import model_workload
from ortstate.timing.runners import Floor

__all__ = ["compare", "native_export"]

_RECURRENT = ("LSTM", "GRU", "RNN")


def native_export(explicit: onnx.ModelProto) -> onnx.ModelProto:
    """The native export of the recurrent stack in ``explicit`` (a converted model, explicit form).

    Raises:
        ValueError: not a stack of recurrent layers fed by one input with its states as variables.
    """
    graph, meta = explicit.graph, read_meta(explicit)
    if meta is None or not meta.variables:
        raise ValueError("not a converted stateful model")
    made = {out: n for n in graph.node for out in n.output}
    layers = [n for n in graph.node if n.op_type in _RECURRENT]
    data = [i for i in graph.input if i.name not in meta.hidden_inputs]
    outputs = [o for o in graph.output if o.name not in meta.hidden_outputs]
    if not layers or len(data) != 1 or len(outputs) != 1:
        raise ValueError("not a stack of recurrent layers with one input and one output")
    x, y = data[0].name, outputs[0].name
    first = made.get(layers[0].input[0])
    batch_first = first is not None and first.op_type == "Transpose" and first.input[0] == x
    states = _states(meta, layers[0].op_type)
    inits = {t.name: t for t in graph.initializer}
    nodes: list[onnx.NodeProto] = []
    tensors: list[onnx.TensorProto] = [_i64("zero", 0), _i64("one", 1)]
    value = x
    if batch_first:
        nodes.append(helper.make_node("Transpose", [x], ["X0"], perm=[1, 0, 2]))
        value = "X0"
    variables = _variables(meta, len(states))
    single = len(layers) == 1  # one layer: the states go in and come out as they are
    lasts: list[list[str]] = [[] for _ in states]
    for k, layer in enumerate(layers):
        tensors += [inits[name] for name in layer.input[1:4] if name]
        sliced = list(states)
        if not single:
            tensors += [_i64(f"s{k}", k), _i64(f"e{k}", k + 1)]
            sliced = [f"{state}_{k}" for state in states]
            for state, part in zip(states, sliced):
                nodes.append(helper.make_node("Slice", [state, f"s{k}", f"e{k}", "zero"], [part]))
        outs = [f"Y{k}"] + [v.state_output or "" if single else f"last{s}_{k}" for s, v in enumerate(variables)]
        ins = [value, *layer.input[1:4], "", *sliced]
        attrs = {a.name: helper.get_attribute_value(a) for a in layer.attribute}
        nodes.append(helper.make_node(layer.op_type, ins, outs, name=f"{layer.op_type}_{k}", **attrs))
        for s in range(len(states)):
            lasts[s].append(outs[1 + s])
        value = f"X{k + 1}"
        nodes.append(helper.make_node("Squeeze", [f"Y{k}", "one"], [value]))
    nodes.append(helper.make_node("Transpose" if batch_first else "Identity", [value], [y], **_perm(batch_first)))
    for s, var in enumerate(variables if not single else []):
        nodes.append(helper.make_node("Concat", lasts[s], [var.state_output or ""], axis=0))
    native = helper.make_graph(nodes, "native", list(graph.input), list(graph.output), tensors)
    model = helper.make_model(native, opset_imports=list(explicit.opset_import), ir_version=explicit.ir_version)
    write_meta(model, meta)
    return model


def _i64(name: str, v: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array([v], np.int64), name)


def _perm(batch_first: bool) -> dict[str, Any]:
    return {"perm": [1, 0, 2]} if batch_first else {}


def _variables(meta: Any, count: int) -> list[Any]:
    """The state variables in the recurrent node's order: h, then c (MakeStateful names them after
    the PyTorch inputs: ``h...``, ``c...``)."""
    by_letter = sorted(meta.variables, key=lambda v: {"h": 0, "c": 1}.get(v.id[:1], 2))
    if len(by_letter) != count:
        raise ValueError(f"{len(by_letter)} variables, a {count}-state recurrent layer")
    return by_letter


def _states(meta: Any, op: str) -> list[str]:
    return [v.state_input or "" for v in _variables(meta, 2 if op == "LSTM" else 1)]


def _median_us(floor: Floor, steps: list[dict[str, np.ndarray]]) -> np.ndarray:
    times = np.empty(len(steps))
    floor.reset()
    for i, feeds in enumerate(steps):
        start = time.perf_counter_ns()
        floor.step(feeds)
        times[i] = time.perf_counter_ns() - start
    return times / 1e3


def compare(xml: Path, steps: int, rounds: int) -> dict[str, Any]:
    """The converted explicit graph and its native export, bare, alternating rounds (1 thread): their
    op counts, p50 µs per step (over every timed step of every round) and the ratio, and how far
    their outputs are apart over the workload (they must agree)."""
    workload = model_workload(xml, steps)
    converted = ortstate.convert(xml, explicit_state=True)
    native = native_export(converted)
    runners = {
        "converted": Floor(converted, 1, initial=workload.initial),
        "native": Floor(native, 1, initial=workload.initial),
    }
    outs = {}
    for name, runner in runners.items():
        runner.reset()
        outs[name] = [np.array(runner.step(f)[0], copy=True) for f in workload.steps[:50]]
    diff = max(float(np.max(np.abs(a - b), initial=0.0)) for a, b in zip(outs["converted"], outs["native"]))
    for runner in runners.values():  # warm up
        _median_us(runner, workload.steps[:200])
    times: dict[str, list[np.ndarray]] = {name: [] for name in runners}
    order = list(runners)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            times[name].append(_median_us(runners[name], workload.steps))
    p50 = {name: float(np.median(np.concatenate(t))) for name, t in times.items()}
    counts = {
        "converted": Counter(n.op_type for n in converted.graph.node),
        "native": Counter(n.op_type for n in native.graph.node),
    }
    return {
        "model": f"{xml.parent.name}",
        "steps": steps,
        "rounds": rounds,
        "p50_us": p50,
        "ratio": p50["converted"] / p50["native"],
        "max_abs_diff": diff,
        "nodes": {k: sum(c.values()) for k, c in counts.items()},
        "transposes": {k: c["Transpose"] for k, c in counts.items()},
    }

"""OpenVINO's side of ``verify``: the reference trajectory of one IR, step by step.

``verify`` imports OpenVINO (only when needed) and hands it over. Its reset is a freshly
compiled model, because its CPU plugin's own ``reset_state()`` leaves some ShapeOf/Broadcast-initialised
caches stale (seen with ``models/kv_cache_toy`` on 2026.4).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import OrtStateError
from ..ir import Graph
from .inputs import inputs_reaching

__all__ = ["OV_CONFIG", "Reference", "one_line"]

# f32 everywhere: the CPU plugin may otherwise compute in bf16 (its default on CPUs with bf16 units),
# keep KV caches in f16 or u8 and quantize the activations of compressed weights to int8 on the fly
# (logits move by ~1e-2; docs/compressed-weights.md).
OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


class Reference:
    """OpenVINO's trajectory: outputs and variables after every step of both phases."""

    def __init__(
        self,
        ov: ModuleType,
        xml: Path,
        bin_path: Path | None,
        graph: Graph,
        initial: Mapping[str, np.ndarray],
        remedy: str = "",
    ) -> None:
        self._ov = ov
        self._remedy = remedy or "give inputs that fit with --shape NAME=D0,D1,... or --input NAME=FILE.npy"
        self._core = ov.Core()
        self._graph = graph
        self.initial = initial
        try:
            self._model = self._core.read_model(str(xml), str(bin_path) if bin_path else None)
        except Exception as exc:  # noqa: BLE001 - openvino raises RuntimeError subclasses
            raise OrtStateError(f"{xml}: OpenVINO cannot read the model: {one_line(exc)}") from None
        # An output without tensor names (a Result whose port the IR leaves unnamed) is paired by position.
        self.output_names = [min(o.get_names(), default="") for o in self._model.outputs]
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
                raise OrtStateError(f"OpenVINO cannot compile the model: {one_line(exc)}") from None
        request = compiled.create_infer_request()
        for state in request.query_state():  # variables that start empty: as a stream starts them
            if state.name in self.initial:
                state.state = self._ov.Tensor(self.initial[state.name])
        return request

    def step(self, request: Any, feeds: Mapping[str, np.ndarray]) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        try:
            result = request.infer(dict(feeds))
        except Exception as exc:  # noqa: BLE001
            raise self._refused(exc, feeds) from None
        outputs = [np.array(result[o]) for o in request.model_outputs]
        states = {s.name: np.array(s.state.data) for s in request.query_state()}
        for name in self.scalars.intersection(states):
            if states[name].size == 1:
                states[name] = states[name].reshape(())
        return outputs, states

    def _refused(self, exc: BaseException, feeds: Mapping[str, np.ndarray]) -> OrtStateError:
        """OpenVINO's reason, the inputs it was given and the ones reaching the node it names."""
        shown = ", ".join(f"{n} {v.dtype}[{','.join(map(str, v.shape))}]" for n, v in feeds.items())
        where = ""
        named = re.search(r"node with name '([^']+)'", str(exc))  # the CPU plugin names the failing node
        layer = next((x for x in self._graph.layers.values() if named and x.name == named.group(1)), None)
        if layer is not None:
            reached = inputs_reaching(self._graph, layer)
            where = f" at {layer.describe()}" + (f", which reads input(s) {', '.join(reached)}" if reached else "")
        return OrtStateError(
            f"OpenVINO cannot run the model on the inputs given ({shown}){where}: {one_line(exc)}; {self._remedy}"
        )


def one_line(exc: BaseException) -> str:
    """OpenVINO's whole message on one line, without its ``Exception from FILE:LINE:`` frames."""
    lines = [line.strip() for line in str(exc).splitlines()]
    kept = [line for line in lines if line and not re.fullmatch(r"Exception from \S+:\d+:", line)]
    return " ".join(kept) or type(exc).__name__

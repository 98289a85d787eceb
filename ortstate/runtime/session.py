"""StatefulSession: an ``onnxruntime.InferenceSession`` with OpenVINO's state API."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import OrtStateError, RunError
from ..model_meta import EXPLICIT, ModelMeta, read_meta
from . import pyops
from .fuse import fuse_state_ops
from .request import InferRequest, VariableState

__all__ = ["StatefulSession"]


def _load(model: str | os.PathLike[str] | bytes | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types
            raise OrtStateError(f"cannot parse ONNX model bytes: {exc}") from None
    path = Path(model)
    if not path.is_file():
        raise OrtStateError(f"{path}: no such file")
    if path.suffix.lower() == ".xml":
        # An IR leaves the form to us: the explicit one is the faster (no Python in the graph).
        from ..convert import convert

        return convert(path, explicit_state=True)
    try:
        return onnx.load(str(path))
    except Exception as exc:  # noqa: BLE001
        raise OrtStateError(f"{path}: not a readable ONNX model: {exc}") from None


def _layer_behind(proto: onnx.ModelProto, message: str) -> str:
    """``"layer 'NAME' (id N, Type-v): "`` for the first node onnxruntime's message names, if the
    converter recorded the layer it came from in the node's doc_string; else ``""``."""
    named = re.findall(r'[Nn]ode ?\(\s*"?([^",)]+)', message)
    if not named:
        return ""
    docs: dict[str, str] = {}
    graphs = [proto.graph]
    while graphs:
        for node in graphs.pop().node:
            docs[node.name] = node.doc_string
            for attr in node.attribute:
                graphs.extend([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs)
    return next((f"{docs[n]}: " for n in named if docs.get(n, "").startswith("layer ")), "")


class StatefulSession:
    """Run a model converted by ortstate, of either form, keeping its variables between runs.

    Args:
        model: path to a ``.onnx``, its bytes, or an ``onnx.ModelProto``; or an OpenVINO IR
            ``.xml``, converted here to the explicit form (the faster one).
        sess_options: ``onnxruntime.SessionOptions``; the custom-op library is registered on it.
        providers: execution providers, CPU by default.

    The session holds a default request (``run``, ``reset_state``, ``query_state``);
    ``create_infer_request()`` makes more, each with its own variables.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes | onnx.ModelProto,
        sess_options: ort.SessionOptions | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        proto = _load(model)
        try:
            meta = read_meta(proto)
        except ValueError as exc:
            raise OrtStateError(f"{model if isinstance(model, (str, os.PathLike)) else 'model'}: {exc}") from None
        self._meta = meta or ModelMeta(form=EXPLICIT, variables=())
        options = sess_options or ort.SessionOptions()
        if sess_options is None:
            options.log_severity_level = 3  # keep ORT's warnings about our graphs away from users
        if self._meta.form != EXPLICIT and self._meta.variables:
            options.register_custom_ops_library(pyops.library_path())
            proto = fuse_state_ops(proto, self._meta)
        try:
            self._ort = ort.InferenceSession(
                proto.SerializeToString(), options, providers=list(providers or ["CPUExecutionProvider"])
            )
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            # Name the IR it came from: a converted model ORT refuses means that IR is inconsistent.
            origin = str(model) if isinstance(model, (str, os.PathLike)) else "model"
            source = f" (converted from {self._meta.source})" if self._meta.source else ""
            layer = _layer_behind(proto, str(exc))
            raise OrtStateError(f"{origin}{source}: {layer}onnxruntime cannot load the model: {exc}") from None
        hidden_in, hidden_out = self._meta.hidden_inputs, self._meta.hidden_outputs
        self._inputs = [i for i in self._ort.get_inputs() if i.name not in hidden_in]
        self._outputs = [o for o in self._ort.get_outputs() if o.name not in hidden_out]
        self._input_names = {i.name for i in self._inputs}
        self._output_names = [o.name for o in self._outputs]
        self._output_set = set(self._output_names)
        self._default = InferRequest(self)

    # -- InferenceSession look-alike -----------------------------------------------------------
    def get_inputs(self) -> list[Any]:
        return list(self._inputs)

    def get_outputs(self) -> list[Any]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return self._ort.get_providers()

    @property
    def form(self) -> str:
        """``custom-op`` or ``explicit``."""
        return self._meta.form

    @property
    def variables(self) -> list[str]:
        return [v.id for v in self._meta.variables]

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None
    ) -> list[np.ndarray]:
        return self._default.run(output_names, input_feed, run_options)

    # -- state ---------------------------------------------------------------------------------
    def reset_state(self) -> None:
        self._default.reset_state()

    def query_state(self) -> list[VariableState]:
        return self._default.query_state()

    def save_state(self, path: str | os.PathLike[str]) -> None:
        self._default.save_state(path)

    def load_state(self, path: str | os.PathLike[str]) -> None:
        self._default.load_state(path)

    def create_infer_request(self) -> InferRequest:
        return InferRequest(self)

    def _check_io(self, output_names: Sequence[str], feeds: Mapping[str, Any]) -> None:
        if feeds.keys() == self._input_names and self._output_set.issuperset(output_names):
            return  # the common case, checked cheaply on every run
        unknown_out = [n for n in output_names if n not in self._output_names]
        if unknown_out:
            raise RunError(f"unknown output(s) {', '.join(unknown_out)} (outputs: {', '.join(self._output_names)})")
        missing = [n for n in self._input_names if n not in feeds]
        unknown = [n for n in feeds if n not in self._input_names]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing input(s) {', '.join(sorted(missing))}")
            if unknown:
                parts.append(f"unknown input(s) {', '.join(sorted(unknown))}")
            raise RunError("; ".join(parts) + f" (inputs: {', '.join(i.name for i in self._inputs)})")

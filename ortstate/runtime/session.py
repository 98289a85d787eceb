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
from ..model_meta import CUSTOM_OP, EXPLICIT, ModelMeta, read_meta
from ..protosize import initializer_bytes
from . import pyops, snapshot
from .fuse import fuse_state_ops
from .guards import empty_input_guards
from .large import OFFLOAD_ABOVE, offload_large_initializers, release_mapped_pages
from .model_check import check_model
from .options import copy_session_options, default_session_options
from .request import InferRequest, VariableState
from .to_explicit import to_explicit

__all__ = ["FORMS", "StatefulSession"]

FORMS = ("auto", CUSTOM_OP, EXPLICIT)


def _load(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto, form: str
) -> tuple[onnx.ModelProto, dict, Path | None]:
    """``(model, in-memory initializer values, directory of its external data)``; the large
    initializers of a file or an IR are not read into the ModelProto (see ``large``)."""
    if isinstance(model, onnx.ModelProto):
        return model, {}, None
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model)), {}, None
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types
            raise OrtStateError(f"cannot parse ONNX model bytes: {exc}") from None
    if not isinstance(model, (str, os.PathLike)):
        raise OrtStateError(f"model: expected a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    path = Path(model)
    if not path.is_file():  # a FIFO would block the read, a device never end it
        raise OrtStateError(f"{path}: {'not a regular file' if path.exists() else 'no such file'}")
    if path.suffix.lower() == ".xml":
        # An IR leaves the form to us: the explicit one is the faster (no Python in the graph).
        from ..convert import build
        from ..ir import read_ir

        built = build(read_ir(path), explicit_state=form != CUSTOM_OP)
        return built.model, built.arrays, None
    try:
        return onnx.load(str(path), load_external_data=False), {}, path.parent
    except Exception as exc:  # noqa: BLE001
        raise OrtStateError(f"{path}: not a readable ONNX model: {exc}") from None


def _hands_over(proto: onnx.ModelProto, arrays: Mapping[str, Any]) -> bool:
    """Whether loading ``proto`` adds to its session options (see ``large``): initializers handed
    over as values, or a model file's external data to be found."""
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    return bool(arrays) or external or initializer_bytes(proto.graph) > OFFLOAD_ABOVE


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


def _fetchable(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, str | None]:
    """ONNX Runtime refuses a run that fetches nothing. A custom-op model whose only effect is on its
    variables (no outputs: OpenVINO's MakeStateful can leave that) gets the token of one of its
    Assign nodes as an extra output, which each run fetches and drops; returns its name."""
    if proto.graph.output:
        return proto, None
    token = next(
        (n.output[0] for n in proto.graph.node if n.domain == pyops.DOMAIN and n.op_type.startswith("Assign")), None
    )
    if token is None:
        return proto, None
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    copy.graph.output.append(onnx.helper.make_tensor_value_info(token, onnx.TensorProto.BOOL, None))
    return copy, token


class StatefulSession:
    """Run a model converted by ortstate, of either form, keeping its variables between runs.

    Args:
        model: path to a ``.onnx``, its bytes, or an ``onnx.ModelProto``; or an OpenVINO IR
            ``.xml``, converted here.
        sess_options: ``onnxruntime.SessionOptions``, never changed: used as given, or, where the
            session must add to them (the custom-op library for the custom ops, a large model's
            initializers), copied first (see :func:`~ortstate.runtime.options.copy_session_options`
            for what a copy keeps); without them, ortstate's
            (:func:`~ortstate.runtime.options.default_session_options`: quiet, and no CPU memory
            arena for models whose variables all have static shapes, which lets requests on
            several threads run in parallel).
        providers: execution providers, CPU by default.
        form: how the variables are kept, the same semantics either way:
            ``"auto"`` (default) the faster: the explicit form; a custom-op model is rewritten
            into it on load (its file is not changed), unless its state ops are not laid out as
            the converter writes them, then its custom ops run;
            ``"explicit"`` the same, but such a model is an error;
            ``"custom-op"`` run a custom-op model's Python state ops as written (an IR is
            converted to that form; an explicit-form model is an error).

    The session holds a default request (``run``, ``reset_state``, ``query_state``);
    ``create_infer_request()`` makes more, each with its own variables.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes | onnx.ModelProto,
        sess_options: ort.SessionOptions | None = None,
        providers: Sequence[str] | None = None,
        form: str = "auto",
    ) -> None:
        if form not in FORMS:
            raise OrtStateError(f"form {form!r}: expected one of {', '.join(FORMS)}")
        proto, arrays, base_dir = _load(model, form)
        origin = str(model) if isinstance(model, (str, os.PathLike)) else "model"
        try:
            meta = read_meta(proto)
        except ValueError as exc:
            raise OrtStateError(f"{origin}: {exc}") from None
        self._meta = meta or ModelMeta(form=EXPLICIT, variables=())
        check_model(proto, self._meta, origin)
        # What snapshots must match: the IR the converter hashed, else (an older conversion) this graph.
        digest = self._meta.digest or (snapshot.model_digest(proto) if self._meta.variables else "")
        self._fingerprint = snapshot.fingerprint(self._meta.variables, digest)
        self._model_form = self._meta.form
        if self._meta.form == EXPLICIT and form == CUSTOM_OP and self._meta.variables:
            raise OrtStateError(f"{origin}: an explicit-form model has no custom state ops to run (form='custom-op')")
        if self._meta.form != EXPLICIT and self._meta.variables and form != CUSTOM_OP:
            rewritten = to_explicit(proto, self._meta)
            if rewritten is not None:
                proto, self._meta = rewritten
            elif form == EXPLICIT:
                why = "its state ops are not laid out as ortstate writes them"
                raise OrtStateError(f"{origin}: {why} (form='explicit')")
        custom_ops = self._meta.form != EXPLICIT and bool(self._meta.variables)
        if sess_options is None:
            options = default_session_options(self._meta)
        elif custom_ops or _hands_over(proto, arrays):
            options = copy_session_options(sess_options)  # the caller's are not ours to change
        else:
            options = sess_options
        self._token: str | None = None  # see _fetchable
        if custom_ops:
            options.register_custom_ops_library(pyops.library_path())
            proto = fuse_state_ops(proto, self._meta)
            proto, self._token = _fetchable(proto)
        # Kept alive with the session: ONNX Runtime uses their memory as its initializers.
        proto, self._offloaded = offload_large_initializers(
            proto, options, in_place=proto is not model, arrays=arrays, base_dir=base_dir
        )
        # Feeds only: an empty state meets a non-empty input and ONNX Runtime words that error itself.
        guards = empty_input_guards(proto)
        try:
            self._ort = ort.InferenceSession(
                proto.SerializeToString(), options, providers=list(providers or ["CPUExecutionProvider"])
            )
            release_mapped_pages(self._offloaded)
            self._offloaded.clear()  # ONNX Runtime copied them (add_external_initializers)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            # Name the IR it came from: a converted model ORT refuses means that IR is inconsistent.
            source = f" (converted from {self._meta.source})" if self._meta.source else ""
            layer = _layer_behind(proto, str(exc))
            raise OrtStateError(f"{origin}{source}: {layer}onnxruntime cannot load the model: {exc}") from None
        hidden_in, hidden_out = self._meta.hidden_inputs, self._meta.hidden_outputs | {self._token}
        self._inputs = [i for i in self._ort.get_inputs() if i.name not in hidden_in]
        self._outputs = [o for o in self._ort.get_outputs() if o.name not in hidden_out]
        self._input_names = {i.name for i in self._inputs}
        self._guards = {name: what for name, what in guards.items() if name in self._input_names}
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
        """The form the variables are kept in: ``custom-op`` or ``explicit``."""
        return self._meta.form

    @property
    def model_form(self) -> str:
        """The form of the model given (a custom-op model may run in the explicit form)."""
        return self._model_form

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
        try:
            if (
                feeds.keys() == self._input_names
                and self._output_set.issuperset(output_names)
                and type(output_names) is not str
            ):
                return  # the common case, checked cheaply on every run
        except (AttributeError, TypeError):  # not a mapping, unhashable names: worded below
            pass
        if not isinstance(feeds, Mapping):
            raise RunError(f"the feeds must be a mapping of input names to arrays, not {type(feeds).__name__}")
        if isinstance(output_names, (str, bytes)) or not isinstance(output_names, Sequence):
            raise RunError(f"output_names must be a list of output names or None, not {type(output_names).__name__}")
        for what, names in (("output", output_names), ("input", feeds)):
            odd = next((n for n in names if not isinstance(n, str)), None)
            if odd is not None:
                raise RunError(f"{what} names are strings, got {odd!r} ({type(odd).__name__})")
        unknown_out = [n for n in output_names if n not in self._output_set]
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

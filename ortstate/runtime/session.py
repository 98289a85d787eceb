"""StatefulSession: an ``onnxruntime.InferenceSession`` with OpenVINO's state API."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from .loaded import LoadedModel, load_model
from .request import InferRequest, VariableState

__all__ = ["StatefulSession"]


class StatefulSession:
    """Run a model converted by ortstate, of either form, keeping its variables between runs.

    Args:
        model: path to a ``.onnx``, its bytes, or an ``onnx.ModelProto``; or an OpenVINO IR
            ``.xml``, converted to the custom-op form first (``ortstate`` registers the converter
            for ``.xml``, see :func:`~ortstate.runtime.source.register_loader`).
        sess_options: ``onnxruntime.SessionOptions``, never changed: used as given, or, where the
            session must add to them (the custom-op library for the custom ops, a large model's
            initializers), copied first (see :func:`~ortstate.runtime.options.copy_session_options`
            for what a copy keeps); without them, ortstate's
            (:func:`~ortstate.runtime.options.default_session_options`: quiet, and no CPU memory
            arena for models whose variables all have static shapes, which lets requests on
            several threads run in parallel).
        providers: execution providers, CPU by default.
        form: how the variables are kept, the same semantics either way:
            ``"auto"`` (default) the faster: the explicit form; a custom-op model (an IR
            included) is rewritten into it on load by :func:`ortstate.passes.to_explicit`, the
            pass ``convert(explicit_state=True)`` runs (its file is not changed), unless its
            state ops are not laid out as the converter writes them, then its custom ops run;
            ``"explicit"`` the same, but such a model is an error;
            ``"custom-op"`` run a custom-op model's Python state ops as written (an
            explicit-form model is an error).

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
        self._model = load_model(model, sess_options, providers, form)
        self._default = InferRequest(self._model)

    @property
    def loaded(self) -> LoadedModel:
        """The model as loaded into ONNX Runtime (session, metadata, names; see :class:`LoadedModel`)."""
        return self._model

    # -- InferenceSession look-alike -----------------------------------------------------------
    def get_inputs(self) -> list[Any]:
        return list(self._model.inputs)

    def get_outputs(self) -> list[Any]:
        return list(self._model.outputs)

    def get_providers(self) -> list[str]:
        return self._model.session.get_providers()

    @property
    def form(self) -> str:
        """The form the variables are kept in: ``custom-op`` or ``explicit``."""
        return self._model.form

    @property
    def model_form(self) -> str:
        """The form of the model given (a custom-op model may run in the explicit form)."""
        return self._model.model_form

    @property
    def variables(self) -> list[str]:
        return [v.id for v in self._model.meta.variables]

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
        return InferRequest(self._model)

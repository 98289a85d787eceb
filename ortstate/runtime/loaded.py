"""A model loaded into ONNX Runtime, as every runtime module sees it: :class:`LoadedModel`.

:func:`load_model` does all a session does before its first run: read the source, check it against
its metadata, pick the form (a custom-op model becomes explicit through
:func:`ortstate.passes.to_explicit` unless asked not to), fuse the custom-op form's state ops, hand
large initializers over, and make the ONNX Runtime session. Requests, runners and the fast path
take what they need from the :class:`LoadedModel` and nothing from ``StatefulSession``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import OrtStateError, PassError, RunError, RuntimeTooOldError
from ..meta import ASSIGN, CONTRIB_DOMAIN, CUSTOM_OP, EXPLICIT, NAME_PREFIX_CHARS, ModelMeta, read_meta
from ..meta.names import shown_name
from ..passes.pipelines import LOAD, LOAD_CUSTOM_OP, PassOptions
from ..passes.walk import nodes
from . import pyops, snapshot
from .grouped_choice import grouped_decode_mode
from .guards import Guard, empty_input_guards
from .large import adds_to_options, hand_over, release_mapped_pages
from .model_check import check_model
from .options import copy_session_options, default_session_options
from .ort_adapter import FastRun
from .source import Source, read_source
from .split_rows import split_rows_values

__all__ = ["FORMS", "LoadedModel", "layer_behind", "load_model", "numpy_dtype"]

FORMS = ("auto", CUSTOM_OP, EXPLICIT)
_NUMPY_OF_ORT = {
    "float": "float32", "double": "float64", "float16": "float16", "bool": "bool",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
}  # fmt: skip


def numpy_dtype(ort_type: str) -> np.dtype | None:
    """The numpy dtype of an ONNX Runtime ``NodeArg.type`` (``tensor(float)``); None for a type
    numpy has no dtype for (bfloat16, strings, sequences...)."""
    match = re.fullmatch(r"tensor\((\w+)\)", ort_type)
    name = _NUMPY_OF_ORT.get(match.group(1)) if match else None
    return None if name is None else np.dtype(name)


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A model in an ONNX Runtime session, with what running it needs.

    Attributes:
        session: the ONNX Runtime session.
        fast: its runs without the Python wrapper (see :class:`~.ort_adapter.FastRun`).
        meta: the metadata of the form that runs.
        model_form: the form of the model given (a custom-op model may run in the explicit form).
        origin: how messages name the model (its path, or ``model``).
        fingerprint: what a snapshot must carry to load into it (see :mod:`.snapshot`).
        inputs, outputs: the graph inputs and outputs a caller feeds and fetches (``NodeArg``\\ s),
            without those the runtime drives (request key, init flags, state inputs and outputs).
        output_names: the names of ``outputs``; runners treat this very list as "all outputs".
        guards: inputs some ONNX Runtime kernels cannot take empty (see :mod:`.guards`).
        token: the custom-op form of a model without outputs: an Assign's token, fetched so that a
            run has something to fetch; else None.
    """

    session: ort.InferenceSession
    fast: FastRun
    meta: ModelMeta
    model_form: str
    origin: str
    fingerprint: str
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    output_names: list[str]
    guards: Mapping[str, Guard]
    token: str | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_input_set", frozenset(i.name for i in self.inputs))
        object.__setattr__(self, "_output_set", frozenset(self.output_names))

    @property
    def form(self) -> str:
        """The form the variables are kept in: ``custom-op`` or ``explicit``."""
        return self.meta.form

    def check_io(self, output_names: Sequence[str], feeds: Mapping[str, Any]) -> None:
        """Raise :class:`RunError` naming what is wrong unless ``feeds`` has exactly the inputs and
        ``output_names`` are outputs."""
        inputs, outputs = self._input_set, self._output_set  # type: ignore[attr-defined]
        try:
            if feeds.keys() == inputs and outputs.issuperset(output_names) and type(output_names) is not str:
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
        unknown_out = [n for n in output_names if n not in outputs]
        if unknown_out:
            raise RunError(f"unknown output(s) {_listed(unknown_out)} (outputs: {_listed(self.output_names)})")
        missing = [i.name for i in self.inputs if i.name not in feeds]
        unknown = [n for n in feeds if n not in inputs]
        parts = [f"missing input(s) {_listed(sorted(missing))}"] if missing else []
        parts += [f"unknown input(s) {_listed(sorted(unknown))}"] if unknown else []
        raise RunError("; ".join(parts) + f" (inputs: {_listed([i.name for i in self.inputs])})")


_LISTED = 20  # names a message lists


def _listed(names: Sequence[str]) -> str:
    """Names as a message lists them, bounded whatever a caller feeds or a model names: at most
    :data:`_LISTED`, and each one long or holding a control character as :func:`shown_name` shows it."""
    shown = [n if len(n) <= NAME_PREFIX_CHARS and n.isprintable() else shown_name(n) for n in names[:_LISTED]]
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return ", ".join(shown) + more


@dataclass(frozen=True)
class _Opened:
    """A model read and checked, rewritten to the form it runs in."""

    source: Source
    meta: ModelMeta  # of the form that runs
    model_form: str  # of the model given
    fingerprint: str


def load_model(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto | Source,
    sess_options: ort.SessionOptions | None = None,
    providers: Sequence[str] | None = None,
    form: str = "auto",
) -> LoadedModel:
    """Load ``model`` into ONNX Runtime (the arguments are ``StatefulSession``'s).

    Raises:
        OrtStateError: a bad form, an unreadable model or metadata, a model not laid out as its
            metadata says, a form the model cannot run in, or ONNX Runtime refusing it.
    """
    opened = _open(model, form)
    source, meta = opened.source, opened.meta
    custom_ops = meta.form != EXPLICIT and bool(meta.variables)
    split_rows = split_rows_values(source.model)  # this CPU's, for the converter's exact int8 split
    options = _options(source, meta, sess_options, custom_ops or bool(split_rows))
    for name, value in split_rows.items():
        options.add_initializer(name, value)
    token = _prepare_custom_ops(source, meta, options) if custom_ops else None
    keep = hand_over(source, options)  # alive until ONNX Runtime copied them
    # Feeds only: an empty state meets a non-empty input and ONNX Runtime words that error itself.
    guards = empty_input_guards(source.model)
    session = _session(source, meta, options, providers)
    release_mapped_pages(keep)
    del keep
    hidden_in, hidden_out = meta.hidden_inputs, meta.hidden_outputs | {token}
    inputs = tuple(i for i in session.get_inputs() if i.name not in hidden_in)
    outputs = tuple(o for o in session.get_outputs() if o.name not in hidden_out)
    names = {i.name for i in inputs}
    return LoadedModel(
        session=session,
        fast=FastRun(session),
        meta=meta,
        model_form=opened.model_form,
        origin=source.origin,
        fingerprint=opened.fingerprint,
        inputs=inputs,
        outputs=outputs,
        output_names=[o.name for o in outputs],
        guards={name: what for name, what in guards.items() if name in names},
        token=token,
    )


def _open(model: str | os.PathLike[str] | bytes | onnx.ModelProto, form: str) -> _Opened:
    """Read ``model``, check it against its metadata, and rewrite it to the form it runs in."""
    if form not in FORMS:
        raise OrtStateError(f"form {form!r}: expected one of {', '.join(FORMS)}")
    grouped = grouped_decode_mode()  # a bad setting refused whatever the model
    source = read_source(model)
    try:
        meta = read_meta(source.model) or ModelMeta(form=EXPLICIT, variables=())
    except ValueError as exc:
        raise OrtStateError(f"{source.origin}: {exc}") from None
    check_model(source.model, meta, source.origin)
    # What snapshots must match: the IR the converter hashed, else (an older conversion) this graph.
    fingerprint = snapshot.model_fingerprint(source.model, meta)
    model_form = meta.form
    meta = _pick_form(source, meta, form, PassOptions(source.origin, grouped_decode=grouped))
    if source.converted:  # an IR given: it is in the form it was converted to
        model_form = meta.form
    return _Opened(source, meta, model_form, fingerprint)


def _options(
    source: Source, meta: ModelMeta, sess_options: ort.SessionOptions | None, adding: bool
) -> ort.SessionOptions:
    """The session options to load with: ortstate's defaults, or the caller's (copied where the
    load adds to them, ``adding`` or external data: the caller's are not ours to change)."""
    if sess_options is None:
        return default_session_options(meta)
    if adding or adds_to_options(source):
        return copy_session_options(sess_options)
    return sess_options


def _prepare_custom_ops(source: Source, meta: ModelMeta, options: ort.SessionOptions) -> str | None:
    """Register the Python ops and fuse the state ops; returns the token to fetch (see
    :func:`_fetchable`)."""
    options.register_custom_ops_library(pyops.library_path())
    LOAD_CUSTOM_OP.run(source.model, meta, own=source.own)
    return _fetchable(source)


# ONNX Runtime's schema check of an attribute it does not have (a contrib op's newer attribute)
_UNKNOWN_ATTRIBUTE = re.compile(r"Unrecognized attribute: (\S+) for operator (\S+)")
_ORT_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib ops (GroupQueryAttention, MatMulNBits, ...)


def _session(
    source: Source, meta: ModelMeta, options: ort.SessionOptions, providers: Sequence[str] | None
) -> ort.InferenceSession:
    """The ONNX Runtime session of ``source``'s model."""
    proto = source.model
    try:
        return ort.InferenceSession(
            proto.SerializeToString(), options, providers=list(providers or ["CPUExecutionProvider"])
        )
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        # Name the IR it came from: a converted model ORT refuses means that IR is inconsistent.
        converted = f" (converted from {meta.source})" if meta.source else ""
        layer = layer_behind(proto, str(exc))
        older = _UNKNOWN_ATTRIBUTE.search(str(exc))
        if older and any(n.op_type == older[2] and n.domain == _ORT_DOMAIN for n in nodes(proto.graph)):
            # a contrib op's attribute this onnxruntime predates: the model was written for a newer one
            raise RuntimeTooOldError(
                f"{source.origin}{converted}: {layer}onnxruntime {ort.__version__} does not know attribute "
                f"'{older[1]}' of operator {older[2]}: the model needs a newer onnxruntime "
                "(pip install -U onnxruntime; LLMs need Python 3.11+, where its newest wheels are)"
            ) from None
        raise OrtStateError(f"{source.origin}{converted}: {layer}onnxruntime cannot load the model: {exc}") from None


def _pick_form(source: Source, meta: ModelMeta, form: str, passes: PassOptions) -> ModelMeta:
    """The metadata of the form the model runs in, ``source``'s model rewritten to it if need be
    (by :data:`~ortstate.passes.pipelines.LOAD`, given ``passes``)."""
    if not meta.variables:
        return meta
    if meta.form == EXPLICIT:
        if form == CUSTOM_OP:
            raise OrtStateError(
                f"{source.origin}: an explicit-form model has no custom state ops to run (form='custom-op')"
            )
        return LOAD.run(source.model, meta, passes, own=source.own).meta
    if form == CUSTOM_OP:
        return meta
    # The explicit form, the faster (no Python in the graph), through the same pass as
    # convert(explicit_state=True), then the KV buffers (see passes.pipelines.LOAD).
    try:
        return LOAD.run(source.model, meta, passes, own=source.own).meta
    except PassError as exc:
        if form == EXPLICIT:
            why = f"its state ops are not laid out as ortstate writes them: {exc}"
            raise OrtStateError(f"{source.origin}: {why} (form='explicit')") from None
        return meta


def _fetchable(source: Source) -> str | None:
    """ONNX Runtime refuses a run that fetches nothing. A custom-op model whose only effect is on its
    variables (no outputs: OpenVINO's MakeStateful can leave that) gets the token of one of its
    Assign nodes as an extra output, which each run fetches and drops; returns its name."""
    graph = source.model.graph
    if graph.output:
        return None
    # Assign or AssignValues{n} (fused)
    token = next((n.output[0] for n in graph.node if n.domain == CONTRIB_DOMAIN and n.op_type.startswith(ASSIGN)), None)
    if token is not None:
        source.own().graph.output.append(onnx.helper.make_tensor_value_info(token, onnx.TensorProto.BOOL, None))
    return token


def layer_behind(proto: onnx.ModelProto, message: str) -> str:
    """``"layer 'NAME' (id N, Type-v): "`` for the first node an ONNX Runtime message names (at load:
    ``Node (name)``, in a run: ``Name:'name'``), where the converter recorded the IR layer it came
    from in the node's doc_string; else ``""``."""
    named = re.findall(r'[Nn]ode ?\(\s*"?([^",)]+)|Name:\'([^\']+)\'', message)
    if not named:
        return ""
    docs = {node.name: node.doc_string for node in nodes(proto.graph)}
    names = [load or run for load, run in named]
    return next((f"{docs[n]}: " for n in names if docs.get(n, "").startswith("layer ")), "")

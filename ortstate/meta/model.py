"""The contract between the converter and the runtime: the state format's names, and the variable
metadata carried in the ONNX model.

The metadata is stored as JSON under the ``ortstate`` key of ``ModelProto.metadata_props``; its
schema (every field's type and range, checked when a model is loaded) is :mod:`.schema`.
Every name the two ONNX forms give their state (op types, domain, attributes, graph inputs and
outputs) is spelled in :mod:`.names` and nowhere else; this module re-exports them, and the
converter, the passes and the runtime import all of it from the package, :mod:`ortstate.meta`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx

from .names import (  # the state format's names, spelled there; imported from here too
    shown_id,
)
from .schema import fail, fields_of, init_dim, integer, items, state_dim, text

__all__ = [
    "CUSTOM_OP",
    "DTYPES",
    "EXPLICIT",
    "FORMAT_VERSION",
    "MAX_INIT_BYTES",
    "MAX_STATE_ELEMENTS",
    "META_KEY",
    "ModelMeta",
    "VariableMeta",
    "initial_shape",
    "read_meta",
    "spanned_elements",
    "write_meta",
]

META_KEY = "ortstate"
FORMAT_VERSION = 1
CUSTOM_OP = "custom-op"
EXPLICIT = "explicit"
# numpy dtype names a variable's values (and their carrier) may have, with their sizes in bytes.
DTYPES = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "bool": 1,
    "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}  # fmt: skip
# No state can span more elements, counting every dim but the zero ones: a non-empty one would
# need terabytes, and an empty one whose other dims multiply past what numpy can describe aborts
# the process inside onnxruntime-extensions (it builds the arrays the custom ops see).
MAX_STATE_ELEMENTS = 1 << 40
# A variable's initial value (zeros of ``init_shape``) is made before any run and, in the custom-op
# form, stored in the model: protobuf caps a model at 2 GB.
MAX_INIT_BYTES = 1 << 31


def initial_shape(var: VariableMeta, feeds: Mapping[str, Any]) -> list[int]:
    """The shape of ``var``'s zero initial value for a run of ``feeds``: ``init_shape``, or the
    ``init_dims`` with each ``[input, axis]`` read from the feeds.

    Raises:
        ValueError: a feed ``init_dims`` reads is missing or has no such axis (naming both).
    """
    if var.init_dims is None:
        return list(var.init_shape)
    shape = []
    for dim in var.init_dims:
        if isinstance(dim, int):
            shape.append(dim)
            continue
        name, axis = dim
        given = np.shape(feeds[name]) if name in feeds else None
        if given is None or axis >= len(given):
            got = "lacks" if given is None else f"gives with shape {list(given)}"
            raise ValueError(
                f"variable {shown_id(var.id)}: its initial value takes dim {axis} of input '{name}', "
                f"which the run {got}"
            )
        shape.append(given[axis])
    return shape


def spanned_elements(shape: Sequence[int]) -> int:
    """The product of the non-zero dims: what :data:`MAX_STATE_ELEMENTS` bounds."""
    return math.prod(d for d in shape if d)


@dataclass(frozen=True)
class VariableMeta:
    """One OpenVINO variable.

    Attributes:
        id: the ``variable_id``.
        element_type: OpenVINO element type name (``f32``, ``f16``, ``i64``, ``boolean`` ...).
        dtype: numpy dtype name of the values users see (``float32``, ``bfloat16``, ...).
        shape: partial shape, one entry per dim: an int (static), ``[lo, hi]`` (``hi`` None when
            unbounded); None for a dynamic rank.
        init: ``zeros`` (a constant zero tensor of ``init_shape``) or ``computed`` (the model
            computes it from the run's inputs).
        init_shape: shape of the zero init (dynamic dims read as 0): what the first run reads of a
            zero init, and what the explicit form is fed while the variable is uninitialised.
        uninit_shape: the shape ``query_state`` shows while the variable is uninitialised, as
            OpenVINO shows it (see :mod:`ortstate.convert.uninitialised`); None in models converted
            before it was recorded (:attr:`uninitialised_shape` then tells it from the rest).
        init_flag: name of the bool graph input telling the model to compute the init value this
            run (computed inits guarded by an ``If``), else None.
        state_input / state_output: explicit form only: graph input and output carrying the value.
        carrier: numpy dtype name of the value as the model exchanges it (custom ops carry f16 and
            bf16 as float32; both forms carry bf16 as float32); ``dtype`` is what users see.
        init_dims: a computed init that is zeros of a shape made of constants and the dims of graph
            inputs (each dim an int, or ``[input name, axis]``): the explicit form feeds that value
            itself on the first run, and the graph reads the state input directly (no init flag).
        reorder: the graph input (1-D int indices) by which the runtime reorders the variable's
            value along axis 0 before a run reads it, as the beam search's ``beam_idx`` does
            (OpenVINO's Gather: negative indices count from the end, one out of range gives zeros);
            the graph itself does not. Left alone when the indices are ``0..n-1``.
        length_input / length_output: explicit form, a KV variable that may be fed as a larger
            buffer (rows beyond the value are spare capacity, written in place by a run): the
            graph input saying how many rows along axis 2 are the value, and the graph output
            saying how many are after the run (see :mod:`ortstate.passes.kv_share`).
    """

    id: str
    element_type: str
    dtype: str
    shape: list[int | list[int | None]] | None
    init: str
    init_shape: list[int]
    init_flag: str | None = None
    state_input: str | None = None
    state_output: str | None = None
    carrier: str | None = None
    uninit_shape: list[int] | None = None
    init_dims: list[int | list[Any]] | None = None
    reorder: str | None = None
    length_input: str | None = None
    length_output: str | None = None

    @property
    def uninitialised_shape(self) -> tuple[int, ...]:
        """What ``query_state`` shows while the variable is uninitialised: ``uninit_shape``, or for
        an older model the variable's shape with dynamic dims at their lower bound where the init is
        zeros (OpenVINO's rule for a constant init), else ``init_shape``."""
        if self.uninit_shape is not None:
            return tuple(self.uninit_shape)
        if self.init == "zeros" and self.shape is not None:
            return tuple(d if isinstance(d, int) else d[0] for d in self.shape)
        return tuple(self.init_shape)


@dataclass(frozen=True)
class ModelMeta:
    """A model's variables and how the runtime drives them.

    Attributes:
        form: ``custom-op`` or ``explicit``.
        request_input: custom-op form: the int64 scalar graph input every state op takes as its
            second input (the runtime feeds each request's key).
        source: the IR file the model was converted from (for messages).
        digest: a hash of the IR files (``.xml`` and ``.bin``) the model was converted from, the
            same for both forms; "" for models converted before it was recorded.
    """

    form: str
    variables: tuple[VariableMeta, ...]
    request_input: str | None = None
    source: str = ""
    version: int = FORMAT_VERSION
    extra: dict[str, str] = field(default_factory=dict)
    digest: str = ""

    def to_json(self) -> str:
        data = asdict(self)
        data["variables"] = [asdict(v) for v in self.variables]
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ModelMeta:
        """Parse and validate (see :func:`read_meta`). Raises ValueError naming the bad field."""
        try:
            data = json.loads(text)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        return _model_meta(data)

    @property
    def hidden_inputs(self) -> set[str]:
        names = {self.request_input} if self.request_input else set()
        for v in self.variables:
            names.update(n for n in (v.init_flag, v.state_input, v.length_input) if n)
        return names

    @property
    def hidden_outputs(self) -> set[str]:
        return {n for v in self.variables for n in (v.state_output, v.length_output) if n}


def write_meta(model: onnx.ModelProto, meta: ModelMeta) -> None:
    for prop in model.metadata_props:
        if prop.key == META_KEY:
            prop.value = meta.to_json()
            return
    model.metadata_props.add(key=META_KEY, value=meta.to_json())


def read_meta(model: onnx.ModelProto) -> ModelMeta | None:
    """The model's ortstate metadata, None if it has none. Raises ValueError if it is malformed."""
    for prop in model.metadata_props:
        if prop.key == META_KEY:
            try:
                return ModelMeta.from_json(prop.value)
            except ValueError as exc:  # json.JSONDecodeError included
                raise ValueError(f"malformed ortstate metadata: {exc}") from None
    return None


# -- the schema: every field's type and range, checked when a model is loaded ---------------------
def _variable(value: Any, where: str) -> VariableMeta:
    data = fields_of(value, where, VariableMeta, {"id", "element_type", "dtype", "shape", "init", "init_shape"})
    shape = None if data["shape"] is None else items(data["shape"], f"{where}.shape", state_dim)
    init_shape = items(data["init_shape"], f"{where}.init_shape", integer)
    checked = {
        "id": text(data["id"], f"{where}.id"),
        "element_type": text(data["element_type"], f"{where}.element_type"),
        "dtype": text(data["dtype"], f"{where}.dtype", choices=tuple(DTYPES)),
        "shape": shape,
        "init": text(data["init"], f"{where}.init", choices=("zeros", "computed")),
        "init_shape": init_shape,
        **{
            k: text(data.get(k), f"{where}.{k}", optional=True)
            for k in ("init_flag", "state_input", "state_output", "length_input", "length_output")
        },
        "carrier": text(data.get("carrier"), f"{where}.carrier", optional=True, choices=tuple(DTYPES)),
        "reorder": text(data.get("reorder"), f"{where}.reorder", optional=True),
        "init_dims": None
        if data.get("init_dims") is None
        else items(data["init_dims"], f"{where}.init_dims", init_dim),
    }
    uninit = data.get("uninit_shape")
    if uninit is not None:
        checked["uninit_shape"] = items(uninit, f"{where}.uninit_shape", integer)
        if shape is not None and len(uninit) != len(shape):
            raise fail(f"{where}.uninit_shape", f"{len(shape)} dims, as the variable's shape", uninit)
    var = VariableMeta(**{**data, **checked})  # a field without a rule here passes through as it is
    lows = [d if isinstance(d, int) else d[0] for d in shape or []]
    if max(spanned_elements(s) for s in (lows, init_shape, var.uninitialised_shape)) > MAX_STATE_ELEMENTS:
        raise ValueError(f"{where}: variable {shown_id(var.id)} spans more than {MAX_STATE_ELEMENTS} elements")
    init_bytes = math.prod(init_shape) * DTYPES[var.carrier or var.dtype]
    if init_bytes > MAX_INIT_BYTES:
        raise ValueError(
            f"{where}: variable {shown_id(var.id)} starts at {init_bytes} bytes, the limit is {MAX_INIT_BYTES}"
        )
    return var


def _model_meta(value: Any) -> ModelMeta:
    data = fields_of(value, "metadata", ModelMeta, {"form", "variables", "version"})
    if data["version"] != FORMAT_VERSION or type(data["version"]) is not int:
        raise ValueError(f"metadata format version {data['version']!r}, expected {FORMAT_VERSION}")
    variables = tuple(items(data["variables"], "variables", _variable))
    counts = Counter(v.id for v in variables)  # not list.count per id: a file may list 100,000
    twice = next((i for i, n in counts.items() if n > 1), None)
    if twice is not None:
        raise ValueError(f"variables: id '{twice}' is listed twice")
    extra = data.get("extra", {})
    if not isinstance(extra, dict) or not all(isinstance(v, str) for v in extra.values()):
        raise fail("extra", "an object of strings", extra)
    source, digest = data.get("source", ""), data.get("digest", "")
    for name, value in (("source", source), ("digest", digest)):
        if not isinstance(value, str):
            raise fail(name, "a string", value)
    checked = {
        "form": text(data["form"], "form", choices=(CUSTOM_OP, EXPLICIT)),
        "variables": variables,
        "request_input": text(data.get("request_input"), "request_input", optional=True),
        "source": source,
        "extra": dict(extra),
        "digest": digest,
    }
    return ModelMeta(**{**data, **checked})

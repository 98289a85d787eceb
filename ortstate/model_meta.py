"""The contract between the converter and the runtime: variable metadata carried in the ONNX model.

Stored as JSON under the ``ortstate`` key of ``ModelProto.metadata_props``. Both sides import this
module and nothing else of each other.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import onnx

__all__ = ["FORMAT_VERSION", "META_KEY", "ModelMeta", "VariableMeta", "read_meta", "write_meta"]

META_KEY = "ortstate"
FORMAT_VERSION = 1
CUSTOM_OP = "custom-op"
EXPLICIT = "explicit"


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
        init_shape: shape of the zero init (dynamic dims read as 0); also the shape ``query_state``
            shows for an uninitialised variable.
        init_flag: name of the bool graph input telling the model to compute the init value this
            run (computed inits guarded by an ``If``), else None.
        state_input / state_output: explicit form only: graph input and output carrying the value.
        carrier: numpy dtype name of the value as the model exchanges it (custom ops carry f16 and
            bf16 as float32; both forms carry bf16 as float32); ``dtype`` is what users see.
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


@dataclass(frozen=True)
class ModelMeta:
    form: str
    variables: tuple[VariableMeta, ...]
    request_input: str | None = None
    source: str = ""
    version: int = FORMAT_VERSION
    extra: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        data["variables"] = [asdict(v) for v in self.variables]
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ModelMeta:
        data = json.loads(text)
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"metadata format version {data.get('version')!r}, expected {FORMAT_VERSION}")
        variables = tuple(VariableMeta(**v) for v in data.pop("variables"))
        return cls(variables=variables, **data)

    @property
    def hidden_inputs(self) -> set[str]:
        names = {self.request_input} if self.request_input else set()
        for v in self.variables:
            names.update(n for n in (v.init_flag, v.state_input) if n)
        return names

    @property
    def hidden_outputs(self) -> set[str]:
        return {v.state_output for v in self.variables if v.state_output}


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
            except (TypeError, KeyError, json.JSONDecodeError) as exc:
                raise ValueError(f"malformed ortstate metadata: {exc}") from None
    return None

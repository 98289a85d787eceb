"""Which weights a conversion kept compressed, and how: stored in the model for ``inspect``.

JSON under the ``ortstate.weights`` key of ``metadata_props``: one row per (source, how) with the
number of weights and the bytes of their ONNX initializers, e.g. ``u4 g128 asym`` ->
``MatMulNBits 4-bit block 128``, or :data:`EXPANDED` for compressed constants folded to f32 (a
pattern the converter does not recognise: nf4, f8, codebooks, or a consumer that needs f32).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import onnx
from onnx import helper

__all__ = [
    "ATTENTION_KEY",
    "EXPANDED",
    "WEIGHTS_KEY",
    "read_attention_report",
    "read_report",
    "write_attention_report",
    "write_report",
]

WEIGHTS_KEY = "ortstate.weights"
ATTENTION_KEY = "ortstate.attention"
EXPANDED = "expanded to f32"


def _tensor_bytes(tensor: onnx.TensorProto) -> int:
    length = next((e.value for e in tensor.external_data if e.key == "length"), None)
    if length is not None:
        return int(length)
    count = 1
    for d in tensor.dims:
        count *= d
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def write_report(model: onnx.ModelProto, records: Sequence[Any], graph: onnx.GraphProto) -> None:
    """Summarise ``records`` (``WeightRecord``s) into ``model``'s metadata (nothing if none)."""
    sizes = {t.name: _tensor_bytes(t) for t in graph.initializer}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    counted: set[str] = set()
    for record in records:
        if not any(name in sizes for name in record.initializers):
            continue  # emitted, then unused (a translator took the weight as a value) and pruned
        kind = record.source.rsplit(" ", 1)[0] if record.how != EXPANDED else record.source
        row = rows.setdefault((kind, record.how), {"source": kind, "as": record.how, "count": 0, "bytes": 0})
        row["count"] += 1
        for name in record.initializers:
            if name in sizes and name not in counted:
                counted.add(name)
                row["bytes"] += sizes[name]
    if rows:
        entry = model.metadata_props.add()
        entry.key, entry.value = WEIGHTS_KEY, json.dumps(list(rows.values()))


def read_report(model: onnx.ModelProto) -> list[dict[str, Any]] | None:
    """The rows :func:`write_report` stored, or None (not converted by this ortstate, or no
    compressed weights)."""
    return _rows(model, WEIGHTS_KEY)


def _rows(model: onnx.ModelProto, key: str) -> list[dict[str, Any]] | None:
    """The JSON list stored under ``key`` of ``model``'s metadata, or None (absent or malformed)."""
    for entry in model.metadata_props:
        if entry.key == key:
            try:
                rows = json.loads(entry.value)
            except ValueError:
                return None
            return rows if isinstance(rows, list) else None
    return None


def write_attention_report(model: onnx.ModelProto, records: Sequence[Any]) -> None:
    """Store how each attention layer runs (``AttentionRecord``s: layer, how, why) for ``inspect``."""
    if records:
        entry = model.metadata_props.add()
        rows = [{"layer": r.layer, "as": r.how, "why": r.why} for r in records]
        entry.key, entry.value = ATTENTION_KEY, json.dumps(rows)


def read_attention_report(model: onnx.ModelProto) -> list[dict[str, Any]] | None:
    """The rows :func:`write_attention_report` stored, or None."""
    return _rows(model, ATTENTION_KEY)

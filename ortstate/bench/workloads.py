"""What a benchmark feeds: inputs generated from an IR's Parameters, decoders as prefill + decode."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Feeds", "Workload", "max_positions", "model_workload"]

Feeds = dict[str, np.ndarray]
_DECODER_INPUTS = {"input_ids", "attention_mask"}
_Inputs = list[tuple[str, np.dtype, list[int | None]]]


@dataclass
class Workload:
    """What one runner does per round: ``prefill`` untimed after a reset, then each of ``steps`` timed."""

    name: str
    xml: Path
    steps: list[Feeds]
    prefill: list[Feeds] = field(default_factory=list)
    ov_config: dict[str, Any] = field(default_factory=dict)
    description: str = ""


def _ir_inputs(xml: Path) -> _Inputs:
    """(name, dtype, dims with None where dynamic) of each Parameter, as the ONNX forms name them."""
    from ..ir import read_ir

    found = []
    for layer in read_ir(xml).parameters:
        port = layer.outputs[0]
        dims = [d.lo if d.is_static else None for d in port.shape.dims or ()]
        dtype = port.element_type.dtype if port.element_type and port.element_type.dtype else np.float32
        found.append((port.names[0] if port.names else layer.name, np.dtype(dtype), dims))
    return found


def max_positions(xml: str | os.PathLike[str]) -> int | None:
    """``max_position_embeddings`` (or ``n_positions``) of the ``config.json`` beside the IR, if any."""
    config = Path(xml).with_name("config.json")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("max_position_embeddings", data.get("n_positions"))
    return value if isinstance(value, int) else None


def model_workload(xml: str | os.PathLike[str], steps: int = 200, position: int = 16, seed: int = 0) -> Workload:
    """Inputs generated from the IR's Parameters.

    A decoder (inputs ``input_ids`` and ``attention_mask``) gets a prefill of ``position - 1`` tokens
    and one decode step (untimed, so the KV caches hold ``position`` tokens), then ``steps`` timed
    one-token decode steps. Other models get random values per step: ints in [0, 4) (valid
    indices for any embedding), floats ~N(0, 0.5), bools False, dynamic dims 1.

    Raises:
        ValueError: a decoder input this cannot generate, or ``position < 2``.
    """
    xml = Path(xml)
    inputs = _ir_inputs(xml)
    rng = np.random.default_rng(seed)
    if _DECODER_INPUTS <= {name for name, _, _ in inputs}:
        if position < 2:
            raise ValueError(f"the decode position must be at least 2, got {position}")

        def feeds(count: int, start: int) -> Feeds:
            return _decoder_feeds(inputs, rng.integers(3, 100, (1, count)), start)

        prefill = [feeds(position - 1, 0), feeds(1, position - 1)]
        timed = [feeds(1, position + k) for k in range(steps)]
        config = {"KV_CACHE_PRECISION": "f32"}
        return Workload(xml.stem, xml, timed, prefill, config, f"one-token decode from position {position}")

    def value(dtype: np.dtype, dims: list[int | None]) -> np.ndarray:
        shape = [1 if d is None else d for d in dims]
        if dtype.kind in "iu":
            return rng.integers(0, 4, shape).astype(dtype)
        if dtype.kind == "b":
            return np.zeros(shape, dtype)
        return (rng.standard_normal(shape) * 0.5).astype(dtype)

    timed = [{name: value(dtype, dims) for name, dtype, dims in inputs} for _ in range(steps)]
    return Workload(xml.stem, xml, timed, description="one step per run")


def _decoder_feeds(inputs: _Inputs, ids: np.ndarray, start: int) -> Feeds:
    """optimum-intel's decoder inputs for ``ids`` placed at positions ``start...``, batch 1."""
    count, out = ids.shape[1], {}
    for name, dtype, _ in inputs:
        if name == "input_ids":
            value = ids
        elif name == "attention_mask":
            value = np.ones((1, start + count))
        elif name == "position_ids":
            value = np.arange(start, start + count)[None]
        elif name == "cache_position":
            value = np.arange(start, start + count)
        elif name == "beam_idx":
            value = np.zeros(1)
        else:
            raise ValueError(f"cannot generate decoder input '{name}'")
        out[name] = np.ascontiguousarray(value, dtype=dtype)
    return out

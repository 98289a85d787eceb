"""What a benchmark feeds: inputs made from an IR's Parameters, decoders as prefill + decode.

A stateful decoder is fed as ``generate`` feeds it, by the same feeding rules
(:mod:`ortstate.decoders.synthetic`); any other model gets random values of its inputs' shapes.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..decoders import FeedRules, SyntheticInputs, read_config
from ..ir import Graph, read_ir

__all__ = ["Feeds", "Workload", "max_positions", "model_label", "model_workload", "weight_precision"]

Feeds = dict[str, np.ndarray]
_ENCODER_POSITIONS = 16  # encoder_hidden_states of an encoder-decoder's decoder: this many positions


@dataclass
class Workload:
    """What one runner does per round: ``prefill`` untimed after a reset, then each of ``steps`` timed.

    Attributes:
        model: how plots and tables name the model (see :func:`model_label`).
        precision: the weights' precision as the IR stores them (see :func:`weight_precision`).
        initial: values every runner sets after each reset: the variables that start empty (see
            :func:`~ortstate.decoders.ir_inputs.empty_start_states`), as a stream of batch 1 starts them.
        rules: a decoder's feeding rules (their ``notes`` and ``remedy`` say what they had to
            guess), None for other models.
    """

    name: str
    xml: Path
    steps: list[Feeds]
    prefill: list[Feeds] = field(default_factory=list)
    ov_config: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    model: str = ""
    precision: str = ""
    initial: dict[str, np.ndarray] = field(default_factory=dict)
    rules: FeedRules | None = None


def model_label(xml: str | os.PathLike[str]) -> str:
    """``folder/file.xml``: the file alone often says nothing (``model.xml``, ``openvino_model.xml``)."""
    path = Path(xml)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


_WEIGHT_NAMES = {"f32": "f32", "f16": "f16", "bf16": "bf16", "f64": "f64", "u8": "int8", "i8": "int8"}
_WEIGHT_NAMES |= {"u4": "int4", "i4": "int4", "nf4": "nf4", "f8e4m3": "f8", "f8e5m2": "f8"}


def weight_precision(graph: Graph) -> str:
    """The element types holding the IR's weights (constants of 1024 elements or more), largest
    share first, those with at least a tenth of the bytes: ``f32``, ``f16``, ``int4 + int8``; ``none``."""
    sizes: Counter[str] = Counter()
    for layer in graph.of_type("Const"):
        etype = layer.outputs[0].element_type if layer.outputs else None
        value = graph.constants.get(layer.id)
        if etype is None or value is None or value.size < 1024:
            continue
        sizes[_WEIGHT_NAMES.get(etype.name, etype.name)] += value.size * etype.bits
    total = sum(sizes.values())
    shown = [name for name, bits in sizes.most_common() if bits >= total / 10]
    return " + ".join(dict.fromkeys(shown)) if shown else "none"


def max_positions(xml: str | os.PathLike[str]) -> int | None:
    """``max_position_embeddings`` (or ``n_positions``) of the ``config.json`` beside the IR, if any."""
    config = Path(xml).with_name("config.json")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("max_position_embeddings", data.get("n_positions"))
    return value if isinstance(value, int) else None


def model_workload(
    xml: str | os.PathLike[str],
    steps: int = 200,
    position: int = 16,
    seed: int = 0,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> Workload:
    """Inputs made from the IR's Parameters.

    A stateful decoder (see :func:`~ortstate.decoders.ir_inputs.decoder_rules`) gets a prefill of
    ``position - 1`` random tokens and one decode step (untimed, so its caches hold ``position``
    tokens), then ``steps`` timed one-token decode steps, every input made by generate's feeding
    rules. Other models get random values per step: ints 0 (valid indices for any table), floats
    ~N(0, 0.5), bools 50/50, dynamic dims 1 (a dynamic rank: a scalar). ``shapes`` gives inputs
    whole shapes (an image model's pixels; a decoder's ``encoder_hidden_states`` only).

    Raises:
        ValueError: ``position < 2`` for a decoder, a shape naming no input or not fitting it, or
            an input of a type numpy cannot hold.
        OrtStateError: the IR cannot be read.
    """
    xml, shapes = Path(xml), shapes or {}
    graph, rng = read_ir(xml), np.random.default_rng(seed)
    label, precision = model_label(xml), weight_precision(graph)
    inputs = SyntheticInputs(
        graph,
        read_config(xml.parent),
        batch=1,
        prompt=position - 1,
        dim=1,
        shapes=shapes,
        scale=0.5,
        context_positions=_ENCODER_POSITIONS,
        scalar_dynamic_rank=True,
    )
    names = [s.name for s in inputs.specs]
    unknown = [n for n in shapes if n not in names]
    if unknown:
        raise ValueError(f"--shape {unknown[0]}: unknown input (inputs: {', '.join(names)})")
    if inputs.rules is not None:
        if position < 2:
            raise ValueError(f"the decode position must be at least 2, got {position}")
        made = [n for n in shapes if n != "encoder_hidden_states"]
        if made:
            raise ValueError(
                f"--shape {made[0]}: a decoder's inputs follow its feeding rules (--position sets the length)"
            )
        feeds = inputs.steps(rng, steps + 2)
        config = {"KV_CACHE_PRECISION": "f32"}
        what = f"one-token decode from position {position}"
        return Workload(xml.stem, xml, feeds[2:], feeds[:2], config, what, label, precision, rules=inputs.rules)

    timed = inputs.steps(rng, steps)
    initial = inputs.initial if timed else {}
    what = "one step per run"
    return Workload(xml.stem, xml, timed, description=what, model=label, precision=precision, initial=initial)

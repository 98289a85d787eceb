"""What a stateful IR's graph says about feeding it: its inputs, the window ``cache_position`` indexes,
its vocabulary, and so whether (and how) it is fed as a decoder.

``generate`` reads it for the decoder of a model folder; ``bench`` and ``verify`` read it for any IR
they are given, so that all three feed a decoder by the same :class:`~ortstate.decoders.feeds.FeedRules`.
The graph is read, never run: what it shows is what the model computes, whatever ``config.json``
says or lacks.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..ir import Graph, Layer, element_type, parse_partial_shape
from .feeds import KNOWN_INPUTS, FeedRules
from .inputs import input_specs
from .model_dir import ModelConfig

__all__ = [
    "cache_position_window",
    "decoder_rules",
    "empty_start_states",
    "logits_size",
]

# Ops through which cache_position's *values* flow unchanged in meaning (an index, shifted, clamped,
# reshaped); ShapeOf and the like read only its length and are not followed.
_VALUE_OPS = frozenset(
    {"Convert", "Clamp", "Add", "Subtract", "Mod", "FloorMod", "Minimum", "Maximum", "Unsqueeze", "Squeeze", "Reshape"}
)
_SCATTERS = frozenset({"ScatterNDUpdate", "ScatterUpdate", "ScatterElementsUpdate"})


def _parameter(graph: Graph, name: str) -> Layer | None:
    return next((p for p in graph.parameters if p.tensor_name() == name), None)


def _followers(graph: Graph, start: Layer, limit: int = 64) -> Iterator[tuple[Layer, int]]:
    """(consumer, input index) of ``start``'s value, followed through :data:`_VALUE_OPS`."""
    seen, frontier = {start.id}, [start]
    while frontier and len(seen) < limit:
        layer = frontier.pop()
        for consumer, index in graph.consumers(layer, 0) if layer.outputs else ():
            yield consumer, index
            if consumer.type in _VALUE_OPS and consumer.id not in seen:
                seen.add(consumer.id)
                frontier.append(consumer)


def _indexed_length(graph: Graph, scatter: Layer) -> int | None:
    """The static length of the data axis a scatter's indices address, if the IR shows it."""
    data = scatter.inputs[0].shape.dims if scatter.inputs else None
    if not data:
        return None
    if scatter.type == "ScatterNDUpdate":
        indices = scatter.inputs[1].shape.dims if len(scatter.inputs) > 1 else None
        depth = indices[-1] if indices else None
        axis = 0 if depth is not None and depth.is_static and depth.lo == 1 else None
    else:  # ScatterUpdate / ScatterElementsUpdate: the axis is input 3
        try:
            source, _ = graph.producer(scatter, 3)
            axis = int(np.asarray(graph.constant(source)).reshape(-1)[0])
        except (IndexError, KeyError, ValueError):
            return None
        axis = axis + len(data) if axis < 0 else axis
    if axis is None or not 0 <= axis < len(data) or not data[axis].is_static:
        return None
    return data[axis].lo or None


def cache_position_window(graph: Graph) -> int | None:
    """The length of the state window ``cache_position`` indexes, or None.

    A mamba-style decoder writes its convolution state with ``state[..., cache_position] = new``:
    ``cache_position`` reaches a scatter's indices, whose data axis has the static length of the
    convolution kernel, and the prefill must cover that whole window (``arange(kernel)``). A
    transformer's ``cache_position`` (positions of the new tokens) indexes no such window.
    """
    param = _parameter(graph, "cache_position")
    if param is None:
        return None
    lengths = {
        _indexed_length(graph, layer)
        for layer, index in _followers(graph, param)
        if layer.type in _SCATTERS and index == 1
    }
    lengths.discard(None)
    return lengths.pop() if len(lengths) == 1 else None


def logits_size(graph: Graph) -> int | None:
    """The static last dim of the ``logits`` output (else the first output): a decoder's vocabulary."""
    ports = []
    for result in graph.results:
        try:
            _, port = graph.producer(result, 0)
        except (IndexError, KeyError):
            continue
        ports.append(port)
    port = next((p for p in ports if "logits" in p.names), ports[0] if ports else None)
    dims = port.shape.dims if port is not None else None
    return dims[-1].lo if dims and dims[-1].is_static and dims[-1].lo else None


def decoder_rules(graph: Graph, config: ModelConfig) -> FeedRules | None:
    """The feeding rules of a stateful decoder (variables, token input, every input known), else None.

    A model without variables (an encoder, text embeddings) or with inputs no rule feeds is not fed
    as a decoder: callers make plain inputs for it.

    Raises:
        DecoderError: a Parameter without an element type numpy can hold (see :func:`.inputs.input_specs`).
    """
    specs = input_specs(graph)
    names = {s.name for s in specs}
    if not graph.of_type("ReadValue") or not names <= KNOWN_INPUTS or not names & {"input_ids", "inputs_embeds"}:
        return None
    return FeedRules.for_model(specs, config, window=cache_position_window(graph))


def empty_start_states(graph: Graph, batch: int) -> dict[str, np.ndarray]:
    """Starting values for the variables that start empty: zeros of a ReadValue-6 without init input
    whose declared shape has dynamic dims (read as 0, so a dynamic-batch LSTM made stateful cannot
    run its first step). A stream of ``batch`` rows starts them as zeros with those dims ``batch``,
    which is what ``bench`` and ``verify`` set on every runtime before the first step and after
    each reset.
    """
    states = {}
    for read in graph.of_type("ReadValue"):
        if read.inputs:
            continue
        try:
            shape = parse_partial_shape(read.attrs.get("variable_shape", "..."))
            dtype = element_type(read.attrs.get("variable_type", "")).dtype
        except (KeyError, ValueError):
            continue
        if shape.dims is None or dtype is None or all(d.is_static for d in shape.dims):
            continue
        dims = [d.lo if d.is_static else batch for d in shape.dims]
        states[read.attrs.get("variable_id", read.name)] = np.zeros(dims, np.dtype(dtype))
    return dict(sorted(states.items()))

"""The one upstream walk over an OpenVINO graph: which layers a value is computed from."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from .graph import Graph, Layer

__all__ = ["producers_of", "upstream"]


def producers_of(graph: Graph, layer: Layer) -> list[Layer]:
    """The layers feeding ``layer``'s inputs, in input order (a layer feeding two inputs twice)."""
    return [graph.producer(layer, index)[0] for index in range(len(layer.inputs))]


def upstream(
    graph: Graph,
    starts: Iterable[Layer],
    follow: Callable[[Layer], Iterable[int]] | None = None,
) -> Iterator[Layer]:
    """``starts`` and every layer they are computed from, each once, depth first.

    Args:
        follow: the input indices of a layer to walk back through (all of them by default); a
            layer it gives none for is given but not walked past.
    """
    pending = list(reversed(list(starts)))
    seen: set[int] = set()
    while pending:
        layer = pending.pop()
        if layer.id in seen:
            continue
        seen.add(layer.id)
        yield layer
        indices = range(len(layer.inputs)) if follow is None else follow(layer)
        pending.extend(reversed([graph.producer(layer, index)[0] for index in indices if index < len(layer.inputs)]))

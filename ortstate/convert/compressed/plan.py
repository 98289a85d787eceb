"""Which compressed-weight MatMuls run together: the split groups of a graph, planned before any
node is written.

The MatMuls reading one activation (q/k/v, gate/up) whose quantized weights share a block and K
form a group: their weights of one bit width run as one ``MatMulNBits`` over the rows of all of
them (one initializer, split after), behind one ``If`` on the activation's row count (see
``exact_split``). The first of them translated writes the whole group.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from ...ir import Graph, Layer
from .recognise import plan_weights
from .weights import QuantizedWeight

__all__ = ["SplitGroup", "split_group", "split_groups"]


@dataclass(frozen=True)
class SplitGroup:
    """MatMuls (in the order their activation's consumers list them) with their weights."""

    members: tuple[tuple[Layer, QuantizedWeight], ...]

    @property
    def block(self) -> int:
        return self.members[0][1].block

    @property
    def k(self) -> int:
        return self.members[0][1].k

    def weights(self, bits: int) -> list[QuantizedWeight]:
        """The members' ``bits``-wide weights (stacked into one initializer)."""
        return [w for _, w in self.members if w.bits == bits]

    @property
    def ordered(self) -> list[Layer]:
        """The MatMuls in the order of their outputs: 4-bit weights first, then 8-bit ones."""
        return [m for bits in (4, 8) for m, w in self.members if w.bits == bits]


_plans: weakref.WeakKeyDictionary[Graph, dict[int, SplitGroup]] = weakref.WeakKeyDictionary()


def split_group(graph: Graph, matmul: Layer) -> SplitGroup:
    """The group of a MatMul whose weight (input 1) is quantized."""
    return split_groups(graph)[matmul.id]


def split_groups(graph: Graph) -> dict[int, SplitGroup]:
    """Every such MatMul's group, by its layer id (memoised per graph)."""
    groups = _plans.get(graph)
    if groups is None:
        groups = _plan(graph)
        _plans[graph] = groups
    return groups


def _quantized_b(graph: Graph, layer: Layer) -> QuantizedWeight | None:
    """The quantized weight a MatMul reads as B, or None (not a MatMul, or B not quantized)."""
    if layer.type != "MatMul" or len(layer.inputs) < 2:
        return None
    weight = plan_weights(graph).weights.get(graph.producer(layer, 1)[0].id)
    return weight if isinstance(weight, QuantizedWeight) else None


def _plan(graph: Graph) -> dict[int, SplitGroup]:
    groups: dict[int, SplitGroup] = {}
    for layer in graph.topological():
        w = _quantized_b(graph, layer)
        if w is None or layer.id in groups:
            continue
        src, port = graph.producer(layer, 0)
        members = tuple(
            (dst, other)
            for dst, index in graph.consumers(src, src.outputs.index(port))
            if index == 0
            and (other := _quantized_b(graph, dst)) is not None
            and (other.block, other.k) == (w.block, w.k)
        )
        group = SplitGroup(members)
        for dst, _ in members:
            groups[dst.id] = group
    return groups

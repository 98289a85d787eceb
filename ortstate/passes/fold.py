"""Fold what is static: what a graph computes the same way in every run is computed once, here.

From what :mod:`.symbolic` knows before a run (top-level graph only; subgraphs keep their nodes and
read folded values as initializers):

- a node whose outputs are small integer tensors known element by element (``Shape`` of a value
  whose dims are numbers; ``Gather``, ``Concat``, ``Cast``, ``Expand``... of such values) becomes
  initializers;
- an LSTM/GRU/RNN ``sequence_lens`` that is, in every row, the length of the node's ``X`` (OpenVINO's
  PyTorch frontend computes it at run time as ``Broadcast(ShapeOf(x)[1], [batch])``) is left out
  where the sequence is known to have a step, else made again in the fewest nodes (see
  :mod:`.sequence_lens`);
- an ``Expand`` or ``Reshape`` whose output has its input's shape, a ``Transpose`` that only moves
  axes of size 1 to where other axes of size 1 were, and a ``Cast`` to its input's type, are
  bypassed (made an ``Identity`` where one makes a graph output).

With a dynamic dim the values depending on it stay computed (the symbols of :mod:`.dims` only say
that two of them are equal). Then what nothing reads any more is pruned, the state ops of the
custom-op form kept. Every rewrite is exact: each output of the model is what it was, in every run
that succeeded before (a run that failed may fail differently or not at all: a ``sequence_lens``
of the wrong length, say, is no longer read).
"""

from __future__ import annotations

import onnx
from onnx import numpy_helper

from ..meta import CONTRIB_DOMAIN
from .dims import Known
from .prune import prune
from .sequence_lens import RECURRENT, Lengths
from .symbolic import analyse
from .walk import all_names, rename_uses, subgraphs

__all__ = ["fold_static"]

_BYPASSED = frozenset({"Expand", "Reshape", "Cast", "Transpose"})


def fold_static(graph: onnx.GraphProto, side_effect_domains: frozenset[str] = frozenset({CONTRIB_DOMAIN})) -> int:
    """Fold ``graph`` in place (nodes of ``side_effect_domains`` are never dropped); returns how many
    nodes it changed or removed."""
    known = analyse(graph)
    lengths = Lengths(graph, known, all_names(graph))
    ends = {v.name for v in [*graph.input, *graph.output]}
    changed = 0
    kept: list[onnx.NodeProto] = []
    bypass: dict[str, str] = {}
    for node in graph.node:
        standard = node.domain in ("", "ai.onnx") and not subgraphs(node)
        outs = [known.get(name) for name in node.output]
        if standard and node.op_type != "Constant" and _all_static(outs) and not ends & set(node.output):
            graph.initializer.extend(
                numpy_helper.from_array(k.array(), name)  # type: ignore[union-attr]
                for name, k in zip(node.output, outs)
            )
            changed += 1
            continue
        if standard and node.op_type in RECURRENT and lengths.rewrite(node, kept):
            changed += 1
        elif standard and node.op_type in _BYPASSED and _unchanged(node, known):
            changed += 1
            if node.output[0] not in ends:
                bypass[node.output[0]] = node.input[0]
                continue
            node.op_type = "Identity"  # a graph output keeps its name
            del node.input[1:]
            del node.attribute[:]
        kept.append(node)
    if changed:
        del graph.node[:]
        graph.node.extend(kept)
        rename_uses(graph, {old: _final(new, bypass) for old, new in bypass.items()})
        prune(graph, side_effect_domains)
    return changed


def _all_static(outs: list[Known | None]) -> bool:
    return bool(outs) and all(k is not None and k.static for k in outs)


def _unchanged(node: onnx.NodeProto, known: dict[str, Known]) -> bool:
    """Whether ``node``'s output is its input: an Expand, Reshape or Transpose to the input's own
    shape (every dim known to be equal; a Transpose keeping the order of the other axes), a Cast to
    the input's own type."""
    source, out = known.get(node.input[0]), known.get(node.output[0])
    if source is None or out is None or source.elem is None or source.elem != out.elem:
        return False
    if node.op_type == "Cast":
        return True
    shape = source.shape
    if shape is None or out.shape != shape or any(d is None for d in shape):
        return False
    if node.op_type == "Transpose":  # the axes not known to be 1 keep their order: the same bytes
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        moved = [p for p in perm or reversed(range(len(shape))) if shape[p] != 1]
        return moved == sorted(moved)
    return True


def _final(name: str, bypass: dict[str, str]) -> str:
    """Where a chain of bypassed nodes leads."""
    while name in bypass:
        name = bypass[name]
    return name

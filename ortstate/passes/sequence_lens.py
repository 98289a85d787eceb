"""An LSTM/GRU/RNN ``sequence_lens`` that is, in every row, the whole sequence of the node's ``X``.

OpenVINO's PyTorch frontend computes one for every recurrent layer at run time,
``Broadcast(ShapeOf(x)[1], [ShapeOf(x)[0]])``: six ONNX nodes in front of each layer once
converted. A native export has none: without it every row runs the whole sequence, the same...
except for a sequence of no steps, where ONNX Runtime leaves ``Y_h``/``Y_c`` as it found the
memory and OpenVINO gives zeros, as ONNX Runtime does given a length of 0. So, for use by
:mod:`.fold`:

- where ``X``'s sequence is known to have one step or more, the input is left out;
- otherwise it is made again from the graph input whose dims it is, in the fewest nodes:
  ``Cast(Shape(x, start=s, end=s+1), int32)``, expanded to ``Shape(x', start=b, end=b+1)`` rows
  where the batch is not known to be 1 (two layers share one).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .build import NewNames
from .dims import Dim, Known, Sym

__all__ = ["RECURRENT", "Lengths", "whole_sequence"]

RECURRENT = frozenset({"LSTM", "GRU", "RNN"})
SEQUENCE_LENS = 4  # the input index of sequence_lens in LSTM, GRU and RNN


def whole_sequence(node: onnx.NodeProto, known: dict[str, Known]) -> tuple[Dim, Dim] | None:
    """``(seq, batch)`` of ``node``'s X when its sequence_lens holds X's sequence length in each of X's
    rows; None when it has none or that is not known."""
    if len(node.input) <= SEQUENCE_LENS or not node.input[SEQUENCE_LENS]:
        return None
    if any(a.name == "layout" and a.i != 0 for a in node.attribute):
        return None
    x, lens = known.get(node.input[0]), known.get(node.input[SEQUENCE_LENS])
    if x is None or lens is None or x.shape is None or len(x.shape) != 3 or lens.shape is None:
        return None
    seq, batch = x.shape[0], x.shape[1]
    if seq is None or batch is None or lens.shape != (batch,):
        return None
    if lens.fill == seq or (lens.values is not None and all(v == seq for v in lens.values)):
        return seq, batch
    return None


class Lengths:
    """Rewrites the whole-sequence ``sequence_lens`` of one graph's recurrent nodes (see the module
    doc); new nodes go into the list given, before the node that reads them."""

    def __init__(self, graph: onnx.GraphProto, known: dict[str, Known], taken: set[str]) -> None:
        self.graph, self.known, self.fresh = graph, known, NewNames(taken)
        self.made: dict[tuple[Dim, Dim], str] = {}  # (seq, batch) -> the value made for it
        self.producer = {out: n for n in graph.node for out in n.output}
        self.inputs = {i.name for i in graph.input}

    def rewrite(self, node: onnx.NodeProto, nodes: list[onnx.NodeProto]) -> bool:
        """Left out, or made again; False where ``node`` is not such a node or is as lean already."""
        found = whole_sequence(node, self.known)
        if found is None:
            return False
        seq, batch = found
        if isinstance(seq, int) and seq >= 1:
            node.input[SEQUENCE_LENS] = ""
            return True
        if not isinstance(seq, Sym) or self._lean(node.input[SEQUENCE_LENS]):
            return False
        value = self.made.get(found)
        if value is None:
            value = self.made[found] = self._make(seq, batch, nodes)
        node.input[SEQUENCE_LENS] = value
        return True

    def _make(self, seq: Sym, batch: Dim, nodes: list[onnx.NodeProto]) -> str:
        length = self._op(nodes, "Shape", [seq.source], "length", start=seq.axis, end=seq.axis + 1)
        lens = self._op(nodes, "Cast", [length], "lens", to=TensorProto.INT32)
        if batch == 1:
            return lens
        if isinstance(batch, Sym):
            rows = self._op(nodes, "Shape", [batch.source], "rows", start=batch.axis, end=batch.axis + 1)
        else:
            rows = self.fresh("rows")
            self.graph.initializer.append(numpy_helper.from_array(np.array([batch], np.int64), rows))
        return self._op(nodes, "Expand", [lens, rows], "lens")

    def _op(self, nodes: list[onnx.NodeProto], op: str, inputs: list[str], hint: str, **attrs: object) -> str:
        out = self.fresh(f"ortstate.sequence_lens/{hint}")
        nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(f"{out}/{op}"), **attrs))
        return out

    def _lean(self, value: str) -> bool:
        """Whether ``value`` is made as this pass makes it (so a second pass leaves it): a Cast of a
        graph input's Shape, perhaps expanded by another Shape or a constant."""
        node = self.producer.get(value)
        if node is not None and node.op_type == "Expand":
            rows = self.producer.get(node.input[1])
            if rows is not None and not self._shape_of_input(rows):
                return False
            node = self.producer.get(node.input[0])
        if node is None or node.op_type != "Cast":
            return False
        shape = self.producer.get(node.input[0])
        return shape is not None and self._shape_of_input(shape)

    def _shape_of_input(self, node: onnx.NodeProto) -> bool:
        return node.op_type == "Shape" and node.input[0] in self.inputs

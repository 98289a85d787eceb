"""Cancel Transposes that undo each other.

OpenVINO lays recurrent states out batch-major (``[batch, dirs, hidden]``), ONNX's LSTM/GRU/RNN
sequence-major (``[dirs, batch, hidden]``, ``Y`` ``[seq, dirs, batch, hidden]``), so a converted
stack of recurrent layers has a Transpose and its inverse around every layer (18 in a 2-layer
LSTM made stateful, where a native ONNX export has 2). Rewrites, repeated until none applies, in
every graph of the model (subgraphs each on their own):

- ``Transpose(Transpose(x, p), q)`` becomes one ``Transpose(x, p∘q)``, or ``x`` itself when that is
  the identity;
- a Transpose whose only reader is a Squeeze, an Unsqueeze, an op of one input that works element
  by element (``Cast``, ``Relu``, ...), or a Concat all of whose inputs are Transposes of one perm,
  moves below it, when every reader of that op's output is a Transpose (which the first rule then
  meets) or another such op of one input (the Transpose moves on below it, towards one).

Values the graph outputs keep their names (an ``Identity`` stands in where a Transpose made one).
Every rewrite is exact: the same elements in the same places.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .build import NewNames
from .walk import all_names, consumers, producers, rename_uses, subgraphs, topological_order

__all__ = ["cancel_transposes"]

# ops of one input computed element by element: a Transpose commutes with them
ELEMENTWISE = frozenset(
    "Cast Relu Tanh Sigmoid Neg Abs Exp Log Sqrt Reciprocal Erf Not Sign Floor Ceil Round Softplus Identity".split()
)
_CHAIN = ELEMENTWISE | {"Squeeze", "Unsqueeze"}  # one data input: a Transpose moves on below them
_MOVES = _CHAIN | {"Concat"}


def cancel_transposes(graph: onnx.GraphProto) -> int:
    """Rewrite ``graph`` (a model's main graph) and its subgraphs in place; returns how many
    Transposes they have fewer."""
    taken = all_names(graph)
    removed = 0
    stack = [graph]
    while stack:
        each = stack.pop()
        removed += _Graph(each, taken).run()
        stack.extend(sub for node in each.node for sub in subgraphs(node))
    return removed


def _perm(node: onnx.NodeProto) -> list[int] | None:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def _set_perm(node: onnx.NodeProto, perm: list[int]) -> None:
    del node.attribute[:]
    node.attribute.append(helper.make_attribute("perm", perm))


class _Graph:
    """One graph being rewritten: indexes rebuilt after every rewrite (graphs here are small)."""

    def __init__(self, graph: onnx.GraphProto, taken: set[str]) -> None:
        self.graph = graph
        self.fresh = NewNames(taken)
        self.outputs = {o.name for o in graph.output}
        self.consts = {t.name: t for t in graph.initializer}
        self.made_axes: set[str] = set()  # initializers this pass added (new Squeeze/Unsqueeze axes)

    def run(self) -> int:
        before = self._count()
        while self._step():
            pass
        self._drop_dead()
        _sort(self.graph)
        return before - self._count()

    def _count(self) -> int:
        return sum(1 for n in self.graph.node if n.op_type == "Transpose" and n.domain in ("", "ai.onnx"))

    def _step(self) -> bool:
        nodes = self.graph.node
        made = {k: nodes[i] for k, i in producers(self.graph).items()}
        readers = consumers(self.graph)
        for node in nodes:
            if node.domain not in ("", "ai.onnx") or not node.input or not node.input[0]:
                continue
            first = made.get(node.input[0])
            if node.op_type == "Transpose" and first is not None and _is_transpose(first):
                self._merge(first, node)
                return True
            if node.op_type in _MOVES and node.output[0] not in self.outputs:
                after = [nodes[i] for i in readers.get(node.output[0], ())]
                if after and all(_is_transpose(n) or n.op_type in _CHAIN for n in after):
                    if self._move(node, made, readers):
                        return True
        return False

    def _merge(self, first: onnx.NodeProto, second: onnx.NodeProto) -> None:
        """``second(first(x))`` -> one Transpose of x (or x)."""
        p, q = _perm(first), _perm(second)
        assert p is not None and q is not None
        composed = [p[i] for i in q]
        second.input[0] = first.input[0]
        if composed != list(range(len(composed))):
            _set_perm(second, composed)
        elif second.output[0] in self.outputs:
            second.op_type = "Identity"
            del second.attribute[:]
        else:
            self.graph.node.remove(second)
            rename_uses(self.graph, {second.output[0]: first.input[0]})

    def _move(self, node: onnx.NodeProto, made: dict, readers: dict) -> bool:
        """Move the Transpose(s) feeding ``node`` below it; False where the rule does not apply."""
        sources = [made.get(name) for name in (node.input if node.op_type == "Concat" else node.input[:1])]
        if not sources or not all(s is not None and _is_transpose(s) for s in sources):
            return False
        perms = [_perm(s) for s in sources]
        if any(p != perms[0] for p in perms) or any(
            len(readers.get(s.output[0], ())) != 1 or s.output[0] in self.outputs for s in sources
        ):
            return False
        p: list[int] = perms[0]  # type: ignore[assignment]
        moved = self._moved_perm(node, p)
        if moved is None:
            return False
        middle = self.fresh(f"{node.output[0]}/untransposed")
        for i, s in enumerate(sources):
            node.input[i] = s.input[0]
        keep, *drop = sources
        for s in drop:
            self.graph.node.remove(s)
        keep.input[0], keep.output[0] = middle, node.output[0]
        node.output[0] = middle
        _set_perm(keep, moved)
        return True

    def _moved_perm(self, node: onnx.NodeProto, p: list[int]) -> list[int] | None:
        """Set ``node`` up to work on the untransposed input(s); the perm to apply after it."""
        if node.op_type in ELEMENTWISE:
            return p
        if node.op_type == "Concat":
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % len(p)
            node.attribute.remove(next(a for a in node.attribute if a.name == "axis"))
            node.attribute.append(helper.make_attribute("axis", p[axis]))
            return p
        axes_tensor = self.consts.get(node.input[1]) if len(node.input) > 1 else None
        if axes_tensor is None:
            return None  # axes computed at run time (or an opset before 13): left alone
        axes = [int(a) for a in numpy_helper.to_array(axes_tensor).reshape(-1)]
        if node.op_type == "Squeeze":
            axes = sorted(a % len(p) for a in axes)
            gone = {p[a] for a in axes}  # the input's axes that go
            rank = {d: i for i, d in enumerate(sorted(set(range(len(p))) - gone))}
            self._set_axes(node, sorted(gone))
            return [rank[p[j]] for j in range(len(p)) if j not in axes]
        out_rank = len(p) + len(axes)
        axes = sorted(a % out_rank for a in axes)
        self._set_axes(node, list(range(len(p), out_rank)))  # new unit axes go last, then move
        kept = iter(p)
        added = iter(range(len(p), out_rank))
        return [next(added) if i in axes else next(kept) for i in range(out_rank)]

    def _set_axes(self, node: onnx.NodeProto, axes: list[int]) -> None:
        name = self.fresh(f"{node.name or node.output[0]}/axes")
        self.graph.initializer.append(numpy_helper.from_array(np.array(axes, dtype=np.int64), name))
        self.consts[name] = self.graph.initializer[-1]
        self.made_axes.add(name)
        node.input[1] = name

    def _drop_dead(self) -> None:
        """Transposes (and axes) nothing reads any more, after the rewrites."""
        while True:
            readers = consumers(self.graph)
            dead = [
                n
                for n in self.graph.node
                if _is_transpose(n) and n.output[0] not in self.outputs and not readers.get(n.output[0])
            ]
            if not dead:
                break
            for n in dead:
                self.graph.node.remove(n)
        used = {name for n in self.graph.node for name in n.input}
        for index in reversed(range(len(self.graph.initializer))):
            name = self.graph.initializer[index].name
            if name in self.made_axes and name not in used:
                del self.graph.initializer[index]


def _is_transpose(node: onnx.NodeProto) -> bool:
    return node.op_type == "Transpose" and node.domain in ("", "ai.onnx") and _perm(node) is not None


def _sort(graph: onnx.GraphProto) -> None:
    """Order ``graph``'s nodes topologically again (a moved Transpose now reads what its reader used
    to make), each node as early in the old order as its inputs allow."""
    nodes = list(graph.node)
    order = topological_order(nodes)
    if len(order) == len(nodes) and order != list(range(len(nodes))):
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)

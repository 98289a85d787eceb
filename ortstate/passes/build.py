"""What a pass uses to make new values and nodes: names no value of the model has
(:class:`NewNames`, :func:`namer`), and nodes each named as its one output (:class:`NodeWriter`).

One place for it: a pass never adds to a set of taken names by hand, and every new name follows
:func:`~ortstate.meta.fresh_name`'s rule (``base``, else ``base_1``, ``base_2``...).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..meta import fresh_name
from .walk import all_names

__all__ = ["NewNames", "NodeWriter", "add_initializer", "namer"]


class NewNames:
    """``new_name(base)``: a name not in ``taken`` (the model's names, see :func:`namer`) nor given
    before; ``taken`` grows with each."""

    __slots__ = ("_tried", "taken")

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self._tried: dict[str, int] = {}  # a pass may make thousands of one base (see fresh_name)

    def __call__(self, base: str) -> str:
        name = fresh_name(base, self.taken, self._tried)
        self.taken.add(name)
        return name


def namer(graph: onnx.GraphProto) -> NewNames:
    """New names for ``graph``'s model: none that a value, node or initializer of it (subgraphs
    included) has, nor any given before. What a pass calls for each value it makes."""
    return NewNames(all_names(graph))


class NodeWriter:
    """Nodes a pass makes, appended to :attr:`nodes` in order, each named as its one output
    (``{prefix}/{op type}``, ``{prefix}/const``, made new by ``new_name``)."""

    def __init__(self, new_name: NewNames, prefix: str) -> None:
        self.new_name = new_name
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []

    def op(self, op_type: str, inputs: list[str], domain: str = "", **attrs: Any) -> str:
        """A node ``op_type(inputs, attrs)``; returns its output."""
        name = self.new_name(f"{self.prefix}/{op_type}")
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, domain=domain, **attrs))
        return name

    def const(self, values: Any) -> str:
        """A ``Constant`` node of ``values`` (a list or scalar: int64; an array: its dtype, integers
        as int64); returns its output."""
        array = values if isinstance(values, np.ndarray) else np.array(values, np.int64)
        if array.dtype.kind == "i":
            array = array.astype(np.int64)
        name = self.new_name(f"{self.prefix}/const")
        self.nodes.append(
            helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(array, name))
        )
        return name

    def take(self) -> list[onnx.NodeProto]:
        """The nodes made so far, the writer starting a new list."""
        made, self.nodes = self.nodes, []
        return made


def add_initializer(graph: onnx.GraphProto, new_name: NewNames, value: np.ndarray, base: str) -> str:
    """``value`` as a new initializer of ``graph``, named from ``base``; returns its name."""
    name = new_name(base)
    graph.initializer.append(numpy_helper.from_array(value, name))
    return name

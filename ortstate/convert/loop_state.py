"""Variables inside TensorIterator/Loop bodies, carried through the ONNX ``Loop``.

OpenVINO keeps a variable read and assigned in a loop body from one iteration to the next and from
one inference to the next: iteration ``i`` reads what iteration ``i - 1`` assigned, the first
iteration reads the variable as the previous inference left it (or its init value), and the last
iteration's value is what the next inference reads. ONNX has no state, so such a variable becomes
a loop-carried value of the ONNX ``Loop``:

- before the loop the main graph reads the variable (a ReadValue custom op, or the explicit form's
  state input) and feeds it in as the carried value's initial value;
- in the body, the ReadValue is the carried value at the start of the iteration (or, for a computed
  init, ``If(uninitialised, init, carried)``, where *uninitialised* is "the variable is uninitialised and this is
  the first iteration": the variable's init flag and ``iteration == 0`` at every loop level), and
  the Assign's input is the carried value at the end of the iteration;
- after the loop the main graph writes the last value to the variable (an Assign custom op, or the
  explicit form's state output).

Reads therefore see the value from before the iteration, as reads in the main graph see the value
from before the run. A variable nested in loops within loops is carried by each of them. One corner
cannot be expressed: a loop that runs no iteration writes back the value it was given, so a
variable with a computed init that was uninitialised becomes zeros of its init shape instead of
staying uninitialised (OpenVINO's CPU plugin returns uninitialised memory from such a loop).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..ir import Graph, Layer
from .builder import GraphBuilder
from .dtypes import onnx_type
from .state import StateWriter
from .variables import Variable

__all__ = ["BodyScope", "MainScope", "VariableScope", "body_variables"]


def body_variables(body: Graph) -> list[str]:
    """Ids of the variables read in ``body`` or in loop bodies nested in it, in graph order."""
    found: list[str] = []
    for layer in body.topological():
        if layer.type == "ReadValue":
            found.append(layer.attrs.get("variable_id", ""))
        if layer.body is not None:
            found.extend(body_variables(layer.body))
    return found


class VariableScope(Protocol):
    """The loop-body variables as one graph level (the main graph or a loop body) sees them."""

    def variable(self, var_id: str) -> Variable: ...

    def value(self, var_id: str) -> str:
        """The variable's value where this level's loop starts (its carried initial value)."""
        ...

    def uninitialised(self, var_id: str) -> str:
        """A bool value: the variable is uninitialised at that point (computed inits only)."""
        ...

    def write(self, var_id: str, value: str) -> None:
        """The variable's value after this level's loop."""
        ...


class MainScope:
    """The main graph: a loop's variables are read before it and written after it."""

    def __init__(self, writer: StateWriter) -> None:
        self.writer = writer

    def variable(self, var_id: str) -> Variable:
        return self.writer.variables[var_id]

    def value(self, var_id: str) -> str:
        return self.writer.read_variable(var_id)

    def uninitialised(self, var_id: str) -> str:
        return self.writer.flag(var_id)

    def write(self, var_id: str, value: str) -> None:
        self.writer.write_variable(var_id, value)


class BodyScope:
    """One loop body: each variable is a carried input (``start``) and output (``end``)."""

    def __init__(self, parent: VariableScope, builder: GraphBuilder, iteration: str) -> None:
        self.parent = parent
        self.b = builder
        self.iteration = iteration
        self.start: dict[str, str] = {}
        self.end: dict[str, str] = {}
        self._uninitialised: dict[str, str] = {}

    def variable(self, var_id: str) -> Variable:
        return self.parent.variable(var_id)

    def carry(self, var_id: str) -> str:
        """Declare the variable's carried body input; returns its name."""
        var = self.variable(var_id)
        self.start[var_id] = self.b.names.fresh(f"{var_id}/carried")
        self.b.add_input(self.start[var_id], onnx_type(var.etype), None)
        return self.start[var_id]

    def value(self, var_id: str) -> str:
        return self.start[var_id]

    def uninitialised(self, var_id: str) -> str:
        if var_id not in self._uninitialised:
            b = self.b
            first = b.op("Equal", [self.iteration, b.const(np.array(0, np.int64))])
            self._uninitialised[var_id] = b.op("And", [self.parent.uninitialised(var_id), first])
        return self._uninitialised[var_id]

    def write(self, var_id: str, value: str) -> None:
        self.end[var_id] = value

    # -- the body's own ReadValue and Assign layers ------------------------------------------
    def read(self, layer: Layer, init: str | None) -> str:
        """A ReadValue in this body; ``init`` is its input's value (None without input)."""
        var_id = layer.attrs.get("variable_id", "")
        var = self.variable(var_id)
        if var.after_assign:
            return self.end[var_id]
        if var.init == "zeros" or init is None:
            return self.start[var_id]  # the zeros came in as the initial value
        b, elem = self.b, onnx_type(var.etype)
        then_branch, else_branch = b.sub(f"init_{var_id}"), b.sub(f"no_init_{var_id}")
        then_branch.add_output(then_branch.op("Identity", [init]), elem, None)
        else_branch.add_output(else_branch.op("Identity", [self.start[var_id]]), elem, None)
        attrs = {"then_branch": then_branch.graph(), "else_branch": else_branch.graph()}
        return b.op("If", [self.uninitialised(var_id)], attrs)

    def assign(self, layer: Layer, value: str) -> None:
        self.write(layer.attrs.get("variable_id", ""), value)

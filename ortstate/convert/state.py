"""ReadValue/Assign: the ONNX form of each variable, written as the driver reaches its layers.

The converter writes the custom-op form only: ``ReadValue(init, request) -> value`` and
``Assign(value, request)`` in the contrib domain (names: :mod:`ortstate.meta`); the
runtime's Python ops read committed values and stage writes. The explicit form is made from it by
:func:`ortstate.passes.to_explicit`.

A computed init is written in the main graph, where the driver translates its layers like any
other; :func:`ortstate.passes.guard_inits` then puts the ones worth skipping behind the variable's
init flag, which the runtime sets only on a variable's first run and after a reset. A loop-body
variable with a computed init gets its flag here: the loop's body reads it (see .loop_state).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import Layer, PartialShape
from ..meta import ASSIGN, CONTRIB_DOMAIN, READ_VALUE, REQUEST_INPUT, VARIABLE_ID, VariableMeta, init_flag_name
from .builder import GraphBuilder
from .dtypes import numpy_type, onnx_type
from .variables import Variable

__all__ = ["StateWriter"]


class StateWriter:
    """Writes the ONNX form of every variable into the main graph's builder."""

    def __init__(self, variables: list[Variable], builder: GraphBuilder) -> None:
        self.variables = {v.id: v for v in variables}
        self.b = builder
        self.meta: dict[str, VariableMeta] = {}
        self._flags: dict[str, str] = {}
        self._written: dict[str, str] = {}  # the value each Assign wrote, by variable
        # The model's own names were reserved first: these get a suffix where one is taken.
        for var in variables:
            if var.flagged:
                self._flags[var.id] = builder.names.fresh(init_flag_name(var.id))
                builder.add_input(self._flags[var.id], TensorProto.BOOL, [])
        self.request_input: str | None = None
        if variables:
            self.request_input = builder.names.fresh(REQUEST_INPUT)
            builder.add_input(self.request_input, TensorProto.INT64, [])

    def variable(self, layer: Layer) -> Variable:
        """The variable a ReadValue or Assign layer of the main graph reads or writes."""
        return self.variables[layer.attrs["variable_id"]]

    def read(self, layer: Layer, init: str | None) -> str:
        """The value of a ReadValue of the main graph: the variable, or ``init`` (the value of its
        input, for a computed init; None otherwise) when uninitialised."""
        var = self.variable(layer)
        self.b.hint = layer.name
        value = self._read(var, init)
        # The state read stays in the model (the variable keeps its ReadValue), but a read after the
        # Assign gives the value just written.
        return self._written[var.id] if var.after_assign else value

    def read_variable(self, var_id: str) -> str:
        """The value of a loop-body variable before the loop (see .loop_state): the variable, or zeros
        of its init shape when uninitialised (a computed init is then made in the body, by the flag)."""
        var = self.variables[var_id]
        if var.init == "zeros":
            return self._read(var, None)
        zeros = self.b.const(np.zeros(var.init_shape, dtype=numpy_type(onnx_type(var.etype))), hint=f"{var.id}_zeros")
        return self._read(var, zeros)

    def flag(self, var_id: str) -> str:
        """The graph input telling a run that a loop-body variable is uninitialised (computed inits)."""
        return self._flags[var_id]

    def _read(self, var: Variable, init: str | None) -> str:
        b = self.b
        etype = onnx_type(var.etype)
        if init is None or var.init == "zeros":
            init = b.const(np.zeros(var.init_shape, dtype=numpy_type(var.carrier_type)), hint=f"{var.id}_zeros")
        elif var.carrier_type != etype:
            init = b.op("Cast", [init], {"to": var.carrier_type})
        value = b.op(READ_VALUE, [init, self.request_input], {VARIABLE_ID: var.id}, domain=CONTRIB_DOMAIN)
        if var.carrier_type != etype:
            value = b.op("Cast", [value], {"to": etype})
        self._record(var)
        return value

    def assign(self, layer: Layer, value: str) -> str:
        """An Assign of the main graph writes ``value``; returns the Assign's output (the same value)."""
        self.b.hint = layer.name
        return self.write_variable(layer.attrs["variable_id"], value)

    def write_variable(self, var_id: str, value: str) -> str:
        """Write ``value`` (of the variable's element type) to the variable; returns ``value``."""
        var = self.variables[var_id]
        b = self.b
        self._written[var.id] = value
        carried = value if var.carrier_type == onnx_type(var.etype) else b.op("Cast", [value], {"to": var.carrier_type})
        b.op(ASSIGN, [carried, self.request_input], {VARIABLE_ID: var.id}, domain=CONTRIB_DOMAIN)
        return value

    def _record(self, var: Variable) -> None:
        self.meta[var.id] = VariableMeta(
            id=var.id,
            element_type=var.etype.name,
            dtype=np.dtype(var.etype.dtype).name,
            shape=_meta_shape(var.shape),
            init=var.init,
            init_shape=list(var.init_shape),
            uninit_shape=list(var.uninit_shape),
            init_flag=self._flags.get(var.id),
            carrier=numpy_type(var.carrier_type).name,
            init_dims=None
            if var.init_dims is None or var.body is not None
            else [d if isinstance(d, int) else list(d) for d in var.init_dims],
        )


def _meta_shape(shape: PartialShape) -> list[int | list[int | None]] | None:
    if shape.dims is None:
        return None
    return [d.lo if d.is_static else [d.lo, d.hi] for d in shape.dims]

"""The shape a variable shows before its first run and after a reset, as OpenVINO shows it.

OpenVINO (2026.4's CPU plugin, the oracle) shows zeros of the *variable's* shape with its dynamic
dims 0: ``(0, 4)`` for a ``variable_shape`` of ``?,4``, even when the init is a constant of shape
``(1, 4)`` (which is still what the first run reads: that is ``init_shape``, a different thing).
The exception is an init its ``MoveReadValueInputsToSubgraph`` pass moves into the state: one
computed from the model's inputs (not a constant after constant folding, not a Parameter read as it
is) by ops that feed nothing but this ReadValue. Such a variable shows the *init's* shape, dynamic
dims 0 (``p * c + c`` with a constant ``c`` of static shape shows that shape). ReadValue-3 has no
variable shape of its own: its variable takes the init's, so a static init shows its shape.

A dimension bounded below shows its lower bound (OpenVINO cannot show such a variable before it is
written); a dynamic-rank variable (which OpenVINO's CPU plugin refuses) shows the init's shape with
dynamic dims 0, or a scalar. ``tests/convert/test_uninitialised.py`` compares each case with OpenVINO.
"""

from __future__ import annotations

from ..ir import Graph, Layer, PartialShape
from ..ir.walk import upstream

__all__ = ["uninitialised_shape"]


def uninitialised_shape(graph: Graph, read: Layer, shape: PartialShape, init_shape: PartialShape) -> tuple[int, ...]:
    """What ``query_state`` shows for the variable ``read`` reads (``shape``: the variable's partial
    shape; ``init_shape``: its init's, unknown rank without an init)."""
    if read.inputs and init_shape.dims is not None and _moved_into_state(graph, read):
        if shape.dims is None or len(shape.dims) != len(init_shape.dims):
            return tuple(d.lo for d in init_shape.dims)
        # the init's dims, tightened by the variable's (IR ports write a range as -1)
        return tuple(i.lo if i.is_static else max(i.lo, v.lo) for i, v in zip(init_shape.dims, shape.dims))
    dims = shape.dims if shape.dims is not None else init_shape.dims
    return tuple(d.lo for d in dims or ())


def _moved_into_state(graph: Graph, read: Layer) -> bool:
    """Whether OpenVINO's CPU plugin computes this init inside the state (see the module docstring)."""
    producer = graph.producer(read, 0)[0]
    if producer.type in ("Parameter", "ReadValue") or _folds(graph, producer):
        return False
    return _feeds_only(graph, producer, read)


def _folds(graph: Graph, layer: Layer) -> bool:
    """True if ``layer`` is computed from constants only, as OpenVINO's constant folding sees it:
    the shape of a statically shaped value is a constant too."""

    def inputs(current: Layer) -> range:
        if current.type == "Const" or (current.type == "ShapeOf" and graph.producer(current, 0)[1].shape.is_static):
            return range(0)
        return range(len(current.inputs))

    return not any(
        current.type in ("Parameter", "ReadValue") or current.body is not None
        for current in upstream(graph, [layer], inputs)
    )


def _feeds_only(graph: Graph, layer: Layer, read: Layer) -> bool:
    """True if every path from ``layer``'s outputs ends at ``read`` (none reaches a Result, an
    Assign or another op with no consumers)."""
    stack, seen = [layer], {layer.id}
    while stack:
        current = stack.pop()
        consumers = [dst for index in range(len(current.outputs)) for dst, _ in graph.consumers(current, index)]
        if not consumers:
            return False
        for dst in consumers:
            if dst.id != read.id and dst.id not in seen:
                seen.add(dst.id)
                stack.append(dst)
    return True

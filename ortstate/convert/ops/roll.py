"""Roll-7 -> Slice + Concat per rolled axis.

OpenVINO: ``Roll(data, shift, axes)``; ``output[..., (j + s) mod n, ...] = data[..., j, ...]`` along each
listed axis, where a negative shift rolls towards lower indices, a shift may exceed the dim, an axis may
be negative (counted from the rank) and may repeat (its shifts add up), and a scalar ``shift`` applies to
every listed axis (a 1-D shift has one value per axis). ONNX has no Roll: with ``k = n - (s mod n)`` the
rolled axis is ``Concat(data[k:], data[:k])``. ``axes`` must be constant (they pick the axes to slice);
``shift`` and the dims may be known only at run time (ONNX ``Mod`` of int64 takes the divisor's sign, as
Python's ``%`` does).
"""

from __future__ import annotations

import numpy as np

from ..context import Context, Node
from ..int64 import int64_vector
from ..registry import translator

_END = np.iinfo(np.int64).max


def _vector(ctx: Context, value: int) -> str:
    return ctx.b.const(np.array([value], np.int64))


def _split_point(node: Node, ctx: Context, axis: int, shift: int | str) -> str | None:
    """``k = n - (shift mod n)`` as a 1-D int64 tensor, or None when the roll is known to do nothing."""
    b = ctx.b
    dims = node.input_shape(0).dims
    static = dims is not None and dims[axis].is_static
    if static and isinstance(shift, int):
        n = dims[axis].lo
        return None if n == 0 or shift % n == 0 else _vector(ctx, n - shift % n)
    if static:
        n = _vector(ctx, dims[axis].lo)
    else:
        n = b.op("Shape", [node.inputs[0]], {"start": axis, "end": axis + 1})
    s = _vector(ctx, shift) if isinstance(shift, int) else shift
    # Max(n, 1): an empty axis rolls to itself, and ONNX Mod by zero is undefined.
    return b.op("Sub", [n, b.op("Mod", [s, b.op("Max", [n, _vector(ctx, 1)])])])


def _shifts(node: Node, ctx: Context, axes: list[int]) -> dict[int, int | str]:
    """Total shift per distinct axis: an int when constant, else a 1-D int64 value."""
    b = ctx.b
    known = node.const(1)
    if known is not None:
        values = [int(v) for v in np.asarray(known).reshape(-1)]
        if np.asarray(known).ndim == 0:
            values *= len(axes)
        if len(values) != len(axes):
            raise node.error(f"shift has {len(values)} values for {len(axes)} axes")
        totals: dict[int, int | str] = {}
        for axis, value in zip(axes, values):
            totals[axis] = int(totals.get(axis, 0)) + value
        return totals
    shift = int64_vector(node, ctx, 1)
    scalar = node.input_rank(1) == 0
    positions: dict[int, list[int]] = {}
    for position, axis in enumerate(axes):
        positions.setdefault(axis, []).append(0 if scalar else position)
    result: dict[int, int | str] = {}
    for axis, picks in positions.items():
        picked = b.op("Gather", [shift, b.const(np.array(picks, np.int64))], {"axis": 0})
        result[axis] = b.op("ReduceSum", [picked, _vector(ctx, 0)], {"keepdims": 1})
    return result


@translator("Roll", 7)
def roll_v7(node: Node, ctx: Context) -> list[str]:
    """Roll-7 (data, shift, axes) -> per rolled axis Concat(Slice(data, k, end), Slice(data, 0, k))."""
    rank = node.input_rank(0)
    axes = node.const_ints(2, "axes")
    for axis in axes:
        if not -rank <= axis < rank:
            raise node.error(f"axis {axis} is out of range [{-rank}, {rank - 1}] for rank {rank}")
    axes = [a + rank if a < 0 else a for a in axes]
    b, out = ctx.b, node.inputs[0]
    for axis, shift in _shifts(node, ctx, axes).items():
        k = _split_point(node, ctx, axis, shift)
        if k is None:
            continue
        where = _vector(ctx, axis)
        tail = b.op("Slice", [out, k, _vector(ctx, _END), where])
        head = b.op("Slice", [out, _vector(ctx, 0), k, where])
        out = b.op("Concat", [tail, head], {"axis": axis})
    if out == node.inputs[0]:
        out = b.op("Identity", [out])
    return [out]

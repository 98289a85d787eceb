"""Pad-1 and Pad-12 -> ONNX Pad, or Gather with computed indices where ONNX Pad has no equivalent.

OpenVINO: ``Pad(data, pads_begin, pads_end[, pad_value]; pad_mode)`` with one pad per axis; Pad-12 also
allows negative pads, which crop. Output index ``o`` along an axis reads input index ``i = o - pads_begin``
*in the uncropped input* (length ``n``), mapped by the mode when outside [0, n)::

    constant   pad_value (default 0)
    edge       clip(i, 0, n - 1)
    reflect    -i below 0, 2n - 2 - i from n on        (edge values not repeated; pads <= n - 1)
    symmetric  -1 - i below 0, 2n - 1 - i from n on    (edge values repeated; pads <= n)

ONNX Pad takes ``pads`` as [begins..., ends...] and has constant, edge and reflect (no symmetric).
ONNX Runtime crops negative pads *before* padding: the same result for constant and edge, but reflect
would mirror the cropped tensor. So constant and edge always map to Pad; reflect only when its pads are
known non-negative; otherwise (symmetric, or reflect with crops or run-time pads) each padded axis is a
Gather of the indices above, computed with Range/Where (folded by ONNX Runtime when all are constants).
"""

from __future__ import annotations

import numpy as np

from ..context import Context, Node
from ..int64 import int64_vector
from ..registry import translator

_MODES = ("constant", "edge", "reflect", "symmetric")


def _scalar(ctx: Context, value: int) -> str:
    return ctx.b.const(np.array(value, np.int64))


def _pad_at(ctx: Context, pads: str, known: np.ndarray | None, axis: int) -> str:
    """Pad ``axis`` of ``pads`` (whose value is ``known`` when constant) as an int64 scalar."""
    if known is not None:
        return _scalar(ctx, int(known[axis]))
    return ctx.b.op("Gather", [pads, _scalar(ctx, axis)], {"axis": 0})


def _length(node: Node, ctx: Context, data: str, axis: int) -> str:
    """Dim ``axis`` of the input as an int64 scalar (a constant when the IR states it)."""
    dims = node.input_shape(0).dims
    if dims is not None and dims[axis].is_static:
        return _scalar(ctx, dims[axis].lo)
    return ctx.b.op("Squeeze", [ctx.b.op("Shape", [data], {"start": axis, "end": axis + 1})])


def _source_indices(ctx: Context, mode: str, n: str, begin: str, end: str) -> str:
    """Input index read by each output position of one axis, for reflect or symmetric."""
    b = ctx.b
    i = b.op("Range", [b.op("Neg", [begin]), b.op("Add", [n, end]), _scalar(ctx, 1)])
    below = b.op("Less", [i, _scalar(ctx, 0)])
    # reflect mirrors about index 0 and n - 1, symmetric about -0.5 and n - 0.5.
    shift = 0 if mode == "reflect" else 1
    i = b.op("Where", [below, b.op("Sub", [_scalar(ctx, -shift), i]), i])
    beyond = b.op("GreaterOrEqual", [i, n])
    mirror = b.op("Sub", [b.op("Sub", [b.op("Add", [n, n]), _scalar(ctx, 2 - shift)]), i])
    return b.op("Where", [beyond, mirror, i])


def _gathered(node: Node, ctx: Context, mode: str, begins: str, ends: str) -> str:
    """Pad axis by axis with Gather (see the module docstring)."""
    known_b, known_e = node.const(1), node.const(2)
    rank = node.input_rank(0)
    if known_b is not None and known_e is not None:
        known_b, known_e = np.asarray(known_b).reshape(-1), np.asarray(known_e).reshape(-1)
        axes = [a for a in range(rank) if known_b[a] or known_e[a]]
    else:
        known_b = known_b if known_b is None else np.asarray(known_b).reshape(-1)
        known_e = known_e if known_e is None else np.asarray(known_e).reshape(-1)
        axes = list(range(rank))
    out = node.inputs[0]
    for axis in axes:
        n = _length(node, ctx, node.inputs[0], axis)
        begin = _pad_at(ctx, begins, known_b, axis)
        end = _pad_at(ctx, ends, known_e, axis)
        out = ctx.b.op("Gather", [out, _source_indices(ctx, mode, n, begin, end)], {"axis": axis})
    return out


def _all_non_negative(node: Node) -> bool:
    values = [node.const(i) for i in (1, 2)]
    return all(v is not None and (np.asarray(v) >= 0).all() for v in values)


def _pad(node: Node, ctx: Context) -> list[str]:
    mode = node.attr_choice("pad_mode", _MODES)
    rank = node.input_rank(0)
    for i, what in ((1, "pads_begin"), (2, "pads_end")):
        dims = node.input_shape(i).dims
        if dims is not None and len(dims) == 1 and dims[0].is_static and dims[0].lo != rank:
            raise node.error(f"{what} expected {rank} values (the data rank), got {dims[0].lo}")
    b = ctx.b
    begins, ends = int64_vector(node, ctx, 1), int64_vector(node, ctx, 2)
    if mode == "symmetric" or (mode == "reflect" and not _all_non_negative(node)):
        return [_gathered(node, ctx, mode, begins, ends)]
    known = [node.const(i) for i in (1, 2)]
    if all(v is not None for v in known):
        pads = b.const(np.concatenate([np.asarray(v).reshape(-1) for v in known]).astype(np.int64))
    else:
        pads = b.op("Concat", [begins, ends], {"axis": 0})
    inputs = [node.inputs[0], pads]
    if mode == "constant" and len(node.inputs) > 3:
        inputs.append(b.op("Reshape", [node.inputs[3], b.const(np.array([], np.int64))]))
    return [b.op("Pad", inputs, {"mode": mode})]


@translator("Pad", 1)
def pad_v1(node: Node, ctx: Context) -> list[str]:
    """Pad-1 (data, pads_begin, pads_end[, pad_value]; pad_mode), non-negative pads."""
    return _pad(node, ctx)


@translator("Pad", 12)
def pad_v12(node: Node, ctx: Context) -> list[str]:
    """Pad-12: Pad-1 whose negative pads crop (reading the same input indices as if not cropped)."""
    return _pad(node, ctx)

"""Slices: Slice, StridedSlice."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..context import Context, Node
from ..int64 import i64, int64_input
from ..registry import translator

_MAX = np.iinfo(np.int64).max


_MIN = np.iinfo(np.int64).min


# -- Slice, StridedSlice -----------------------------------------------------------------------
@translator("Slice", 8)
def slice_v8(node: Node, ctx: Context) -> list[str]:
    """Slice-8 (data, start, stop, step[, axes]) -> Slice (data, starts, ends, axes, steps), all int64.
    Clamping and negative values follow numpy in both."""
    inputs = [node.inputs[0]] + [int64_input(node, ctx, i) for i in (1, 2)]
    axes = int64_input(node, ctx, 4) if len(node.inputs) > 4 else ""
    return [ctx.b.op("Slice", inputs + [axes, int64_input(node, ctx, 3)])]


@dataclass(frozen=True)
class _Entry:
    """One entry of a StridedSlice spec. ``axis`` is the input axis sliced (``slice``/``shrink``) or the
    output position of a new axis (``new``); counted from the end after an ellipsis, so no rank is needed."""

    kind: str
    spec: int
    axis: int


def _strided_plan(node: Node, length: int) -> list[_Entry]:
    """The non-ellipsis entries of the spec, with OpenVINO's precedence new > shrink > ellipsis > slice."""
    # Bits past the spec's length are ignored; missing ones are 0.
    masks = [node.attr_ints(f"{name}_mask", []) for name in ("new_axis", "shrink_axis", "ellipsis")]
    bits = [[i < len(mask) and mask[i] == 1 for mask in masks] for i in range(length)]
    kinds = [("new", "shrink", "...")[bit.index(True)] if any(bit) else "slice" for bit in bits]
    if kinds.count("...") > 1:
        raise node.error("ellipsis_mask has more than one bit set")
    split = kinds.index("...") if "..." in kinds else length
    entries: list[_Entry] = []
    axis = out = 0
    for i in range(split):
        entries.append(_Entry(kinds[i], i, out if kinds[i] == "new" else axis))
        axis += kinds[i] != "new"
        out += kinds[i] != "shrink"
    axis = out = -1
    for i in range(length - 1, split, -1):
        entries.append(_Entry(kinds[i], i, out if kinds[i] == "new" else axis))
        axis -= kinds[i] != "new"
        out -= kinds[i] != "shrink"
    return entries


@translator("StridedSlice", 1)
def strided_slice_v1(node: Node, ctx: Context) -> list[str]:
    """StridedSlice-1 -> Slice, then Squeeze (shrink_axis_mask), then Unsqueeze (new_axis_mask).

    A set ``begin_mask``/``end_mask`` bit means *ignore* that begin/end: the whole range in the stride's
    direction (ONNX start 0 / end INT64_MAX, or INT64_MAX / INT64_MIN for a negative stride). A shrink axis
    takes element ``begin`` whatever the masks say. Dims after an ``ellipsis_mask`` entry are addressed
    from the end. begin/end/stride may be computed at run time; the masks are attributes.
    """
    b = ctx.b
    begin = node.const(1)
    length = int(np.asarray(begin).size) if begin is not None else (node.input_shape(1).to_list() or [-1])[0]
    if length < 0:
        raise node.error("begin needs a static length")
    entries = _strided_plan(node, length)
    cut = [e for e in entries if e.kind != "new"]
    begin_mask, end_mask = node.attr_ints("begin_mask", []), node.attr_ints("end_mask", [])
    masked_begin = [e.kind == "slice" and e.spec < len(begin_mask) and begin_mask[e.spec] == 1 for e in cut]
    masked_end = [e.kind == "slice" and e.spec < len(end_mask) and end_mask[e.spec] == 1 for e in cut]
    out = node.inputs[0]
    if cut:
        known = [node.const(i) for i in range(1, len(node.inputs))]
        if all(v is not None for v in known):
            starts, ends, steps = _strided_constants(cut, masked_begin, masked_end, *known)
            start_in, end_in, step_in = i64(ctx, starts), i64(ctx, ends), i64(ctx, steps)
        else:
            start_in, end_in, step_in = _strided_runtime(node, ctx, cut, masked_begin, masked_end)
        out = b.op("Slice", [out, start_in, end_in, i64(ctx, [e.axis for e in cut]), step_in])
    shrink = [e.axis for e in entries if e.kind == "shrink"]
    if shrink:
        out = b.op("Squeeze", [out, i64(ctx, shrink)])
    new = [e.axis for e in entries if e.kind == "new"]
    if new:
        out = b.op("Unsqueeze", [out, i64(ctx, new)])
    return [out if cut or shrink or new else b.op("Identity", [out])]


def _strided_constants(
    cut: list[_Entry], masked_begin: list[bool], masked_end: list[bool], *values: np.ndarray
) -> tuple[list[int], list[int], list[int]]:
    begin, end = (np.asarray(v).reshape(-1).astype(np.int64) for v in values[:2])
    stride = np.asarray(values[2]).reshape(-1).astype(np.int64) if len(values) > 2 else np.ones_like(begin)
    starts, ends, steps = [], [], []
    for e, mb, me in zip(cut, masked_begin, masked_end):
        if e.kind == "shrink":
            first = int(begin[e.spec])
            starts.append(first)
            ends.append(_MAX if first == -1 else first + 1)
            steps.append(1)
        else:
            step = int(stride[e.spec])
            starts.append((_MAX if step < 0 else 0) if mb else int(begin[e.spec]))
            ends.append((_MIN if step < 0 else _MAX) if me else int(end[e.spec]))
            steps.append(step)
    return starts, ends, steps


def _strided_runtime(
    node: Node, ctx: Context, cut: list[_Entry], masked_begin: list[bool], masked_end: list[bool]
) -> tuple[str, str, str]:
    """The constant path's arithmetic as ONNX ops, for begin/end/stride known only at run time."""
    b = ctx.b
    picks = i64(ctx, [e.spec for e in cut])
    begin = b.op("Gather", [int64_input(node, ctx, 1), picks])
    end = b.op("Gather", [int64_input(node, ctx, 2), picks])
    stride = b.op("Gather", [int64_input(node, ctx, 3), picks]) if len(node.inputs) > 3 else i64(ctx, [1] * len(cut))
    shrink = b.const(np.array([e.kind == "shrink" for e in cut]))
    backwards = b.op("Less", [stride, i64(ctx, 0)])
    starts = b.op(
        "Where", [b.const(np.array(masked_begin)), b.op("Where", [backwards, i64(ctx, _MAX), i64(ctx, 0)]), begin]
    )
    whole = b.op("Where", [backwards, i64(ctx, _MIN), i64(ctx, _MAX)])
    ends = b.op("Where", [b.const(np.array(masked_end)), whole, end])
    after = b.op("Add", [begin, i64(ctx, 1)])
    shrink_end = b.op("Where", [b.op("Equal", [begin, i64(ctx, -1)]), i64(ctx, _MAX), after])
    ends = b.op("Where", [shrink, shrink_end, ends])
    steps = b.op("Where", [shrink, i64(ctx, 1), stride])
    return starts, ends, steps

"""Indexing: Gather, GatherND, GatherElements, Slice, StridedSlice, Select, OneHot."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from ..compressed import float_weight, gather_quantized
from ..context import Context, Node
from ..dtypes import numpy_type
from ..registry import translator
from ..weights import FloatWeight, QuantizedWeight
from .shape import int64_input, scalar_const

_MAX = np.iinfo(np.int64).max
_MIN = np.iinfo(np.int64).min


def _i64(ctx: Context, value: object) -> str:
    return ctx.b.const(np.array(value, np.int64))


# -- Gather ------------------------------------------------------------------------------------
def _gather_any(node: Node, ctx: Context, batch_dims: int, zero_out_of_range: bool) -> list[str]:
    """Gather, with a compressed table (see ``weights``) read compressed."""
    weight = node.weight(0)
    if isinstance(weight, QuantizedWeight):  # an embedding table kept compressed (axis 0, no batch)
        indices = node.inputs[1] if node.input_type(1).name in ("i32", "i64") else int64_input(node, ctx, 1)
        return [gather_quantized(node, ctx, weight, indices)]
    if isinstance(weight, FloatWeight):  # gather f16 rows, then widen them: the table stays f16
        stored, _ = float_weight(ctx, weight)
        stored_type = TensorProto.BFLOAT16 if weight.value.dtype.name == "bfloat16" else TensorProto.FLOAT16
        out = _gather(node, ctx, batch_dims, zero_out_of_range, (stored, stored_type))
        return [ctx.b.op("Cast", [out[0]], {"to": node.onnx_output_type(0)})]
    return _gather(node, ctx, batch_dims, zero_out_of_range)


def _gather(
    node: Node, ctx: Context, batch_dims: int, zero_out_of_range: bool, data: tuple[str, int] | None = None
) -> list[str]:
    """Output ``data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1:]`` for ``data``
    (an ONNX value and its type; input 0 by default).

    batch_dims 0 is ONNX Gather. Otherwise the gathered axis is moved next to the batch dims, GatherND with
    ``batch_dims`` gathers one index per batch entry, and the dims between batch and axis are moved back.
    """
    data_name, data_type = data or (node.inputs[0], node.onnx_input_type(0))
    b = ctx.b
    rank = node.input_rank(0)
    axis = scalar_const(node, 2, "axis")
    axis += rank if axis < 0 else 0
    if batch_dims < 0:
        batch_dims += node.input_rank(1)
    if not 0 <= batch_dims <= axis < rank:
        raise node.error(f"expected 0 <= batch_dims <= axis < rank {rank}, got batch_dims={batch_dims}, axis={axis}")
    indices, valid = node.inputs[1], None
    if zero_out_of_range and not _known_in_range(node, axis):
        constant_data = data is None and batch_dims == 0
        if constant_data and (out := _gather_constant_guarded(node, ctx, axis)) is not None:
            return [out]
        indices = int64_input(node, ctx, 1)
        dim = b.op("Gather", [b.op("Shape", [data_name]), _i64(ctx, axis)])
        valid = b.op("And", [b.op("GreaterOrEqual", [indices, b.op("Neg", [dim])]), b.op("Less", [indices, dim])])
        indices = b.op("Where", [valid, indices, _i64(ctx, 0)])
    if batch_dims == 0:
        out = b.op("Gather", [data_name, indices], {"axis": axis})
    else:
        out = _batched_gather(node, ctx, data_name, indices, batch_dims, axis, rank)
    if valid is not None:
        # valid has the indices' shape [B..., I...]; align it with the output [B..., P..., I..., S...].
        between = list(range(batch_dims, axis)) + list(range(-1, axis - rank, -1))
        mask = b.op("Unsqueeze", [valid, b.const(np.array(between, np.int64))]) if between else valid
        zero = b.const(np.zeros((), numpy_type(data_type)))
        out = b.where(mask, out, zero, data_type)
    return [out]


# Constant data up to this size (stored twice) gets the cheap range guard below.
DOUBLED_LIMIT = 16 << 20


def _gather_constant_guarded(node: Node, ctx: Context, axis: int) -> str | None:
    """Gather-8 on constant data (an embedding table): ``Gather(concat(data, data, zeros),
    Clip(indices + N, -1, 2N))``, three nodes where the general guard takes eight. An index ``i``
    in [-N, N) lands on ``i + N``: the first copy serves the negative ones, the second the others;
    any other index is clipped to 2N or -1, both the zero slice at the end. None when the data is
    not constant or too large to store twice."""
    data = node.const(0)
    if data is None or data.ndim == 0 or 2 * data.nbytes > DOUBLED_LIMIT:
        return None
    b = ctx.b
    dtype = numpy_type(node.onnx_input_type(0))
    n = data.shape[axis]
    data = data.astype(dtype, copy=False)
    zeros = np.zeros([1 if i == axis else d for i, d in enumerate(data.shape)], dtype)
    doubled = np.concatenate([data, data, zeros], axis=axis)
    shifted = b.op("Add", [int64_input(node, ctx, 1), _i64(ctx, n)])
    clipped = b.op("Clip", [shifted, _i64(ctx, -1), _i64(ctx, 2 * n)])
    return b.op("Gather", [b.const(doubled, hint="gather_data_doubled"), clipped], {"axis": axis})


def _known_in_range(node: Node, axis: int) -> bool:
    """True when constant indices lie within a static dim, so no run-time range check is needed."""
    indices = node.const(1)
    dims = node.input_shape(0).to_list()
    if indices is None or not dims or axis >= len(dims) or dims[axis] < 0:
        return False
    return bool(np.all((indices >= -dims[axis]) & (indices < dims[axis])))


def _batched_gather(node: Node, ctx: Context, data: str, indices: str, batch_dims: int, axis: int, rank: int) -> str:
    b = ctx.b
    if axis > batch_dims:
        data = b.op("Transpose", [data], {"perm": _move(list(range(rank)), axis, batch_dims)})
    if indices == node.inputs[1]:
        indices = int64_input(node, ctx, 1)
    points = b.op("Unsqueeze", [indices, _i64(ctx, [-1])])
    out = b.op("GatherND", [data, points], {"batch_dims": batch_dims})
    if axis == batch_dims:
        return out
    # GatherND gave [B..., I..., P..., S...]; the P dims go back in front of I.
    q = node.input_rank(1)
    out_rank = rank - 1 + q - batch_dims
    order = list(range(batch_dims)) + list(range(q, q + axis - batch_dims)) + list(range(batch_dims, q))
    return b.op("Transpose", [out], {"perm": order + list(range(q + axis - batch_dims, out_rank))})


def _move(order: list[int], src: int, dst: int) -> list[int]:
    item = order.pop(src)
    order.insert(dst, item)
    return order


@translator("Gather", 1)
def gather_v1(node: Node, ctx: Context) -> list[str]:
    """Gather-1 -> Gather along a constant ``axis`` input. Indices must lie in [0, dim) (else undefined)."""
    return _gather_any(node, ctx, 0, zero_out_of_range=False)


@translator("Gather", 7)
def gather_v7(node: Node, ctx: Context) -> list[str]:
    """Gather-7: adds ``batch_dims`` (negative counts from the indices' rank)."""
    return _gather_any(node, ctx, node.attr_int("batch_dims", 0), zero_out_of_range=False)


@translator("Gather", 8)
def gather_v8(node: Node, ctx: Context) -> list[str]:
    """Gather-8: indices in [-dim, dim) (negative as in ONNX); others give zeros, where ONNX fails."""
    return _gather_any(node, ctx, node.attr_int("batch_dims", 0), zero_out_of_range=True)


@translator("GatherND", 5)
def gather_nd_v5(node: Node, ctx: Context) -> list[str]:
    """GatherND-5 -> GatherND, except that with ``batch_dims`` > 0 OpenVINO flattens the batch dims into one."""
    b = ctx.b
    batch_dims = node.attr_int("batch_dims", 0)
    out = b.op("GatherND", [node.inputs[0], int64_input(node, ctx, 1)], {"batch_dims": batch_dims})
    if batch_dims == 0:
        return [out]
    rest = b.op("Slice", [b.op("Shape", [out]), _i64(ctx, [batch_dims]), _i64(ctx, [_MAX])])
    return [b.op("Reshape", [out, b.op("Concat", [_i64(ctx, [-1]), rest], {"axis": 0})])]


@translator("GatherND", 8)
def gather_nd_v8(node: Node, ctx: Context) -> list[str]:
    """GatherND-8 -> GatherND: batch dims are kept, as in ONNX."""
    batch_dims = node.attr_int("batch_dims", 0)
    return [ctx.b.op("GatherND", [node.inputs[0], int64_input(node, ctx, 1)], {"batch_dims": batch_dims})]


@translator("GatherElements", 6)
def gather_elements_v6(node: Node, ctx: Context) -> list[str]:
    """GatherElements-6 -> GatherElements (same ``axis`` attribute, negative indices allowed in both)."""
    return [ctx.b.op("GatherElements", node.inputs[:2], {"axis": node.attr_int("axis")})]


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
            start_in, end_in, step_in = _i64(ctx, starts), _i64(ctx, ends), _i64(ctx, steps)
        else:
            start_in, end_in, step_in = _strided_runtime(node, ctx, cut, masked_begin, masked_end)
        out = b.op("Slice", [out, start_in, end_in, _i64(ctx, [e.axis for e in cut]), step_in])
    shrink = [e.axis for e in entries if e.kind == "shrink"]
    if shrink:
        out = b.op("Squeeze", [out, _i64(ctx, shrink)])
    new = [e.axis for e in entries if e.kind == "new"]
    if new:
        out = b.op("Unsqueeze", [out, _i64(ctx, new)])
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
    picks = _i64(ctx, [e.spec for e in cut])
    begin = b.op("Gather", [int64_input(node, ctx, 1), picks])
    end = b.op("Gather", [int64_input(node, ctx, 2), picks])
    stride = b.op("Gather", [int64_input(node, ctx, 3), picks]) if len(node.inputs) > 3 else _i64(ctx, [1] * len(cut))
    shrink = b.const(np.array([e.kind == "shrink" for e in cut]))
    backwards = b.op("Less", [stride, _i64(ctx, 0)])
    starts = b.op(
        "Where", [b.const(np.array(masked_begin)), b.op("Where", [backwards, _i64(ctx, _MAX), _i64(ctx, 0)]), begin]
    )
    whole = b.op("Where", [backwards, _i64(ctx, _MIN), _i64(ctx, _MAX)])
    ends = b.op("Where", [b.const(np.array(masked_end)), whole, end])
    after = b.op("Add", [begin, _i64(ctx, 1)])
    shrink_end = b.op("Where", [b.op("Equal", [begin, _i64(ctx, -1)]), _i64(ctx, _MAX), after])
    ends = b.op("Where", [shrink, shrink_end, ends])
    steps = b.op("Where", [shrink, _i64(ctx, 1), stride])
    return starts, ends, steps


# -- Select, OneHot ----------------------------------------------------------------------------
@translator("Select", 1)
def select_v1(node: Node, ctx: Context) -> list[str]:
    """Select-1 (cond, then, else) -> Where; ``auto_broadcast`` numpy is ONNX's broadcast, none needs none."""
    node.attr_choice("auto_broadcast", ("numpy", "none"), "numpy")  # both are Where: "none" has equal shapes
    return [ctx.b.where(*node.inputs[:3], node.onnx_output_type())]


@translator("OneHot", 1)
def one_hot_v1(node: Node, ctx: Context) -> list[str]:
    """OneHot-1 (indices, depth, on, off; ``axis``) as Where(indices == range(depth), on, off).

    Not ONNX OneHot: it counts negative indices from the end where OpenVINO gives an all-``off`` row for any
    index outside [0, depth), and onnxruntime implements it for few type combinations.
    """
    b = ctx.b
    rank = node.input_rank(0)
    axis = node.attr_int("axis")
    axis += rank + 1 if axis < 0 else 0
    indices = b.op("Unsqueeze", [int64_input(node, ctx, 0), _i64(ctx, [axis])])
    depth = b.op("Reshape", [int64_input(node, ctx, 1), b.const(np.zeros(0, np.int64))])
    classes = b.op("Range", [_i64(ctx, 0), depth, _i64(ctx, 1)])
    classes = b.op("Reshape", [classes, _i64(ctx, [-1] + [1] * (rank - axis))])
    hot = b.op("Equal", [indices, classes])
    return [b.where(hot, node.inputs[2], node.inputs[3], node.onnx_output_type())]

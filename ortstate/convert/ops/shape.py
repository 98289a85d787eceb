"""Shape manipulation: Concat, Reshape, Squeeze, Unsqueeze, Transpose, Split, VariadicSplit, Tile.

Also the small helpers other translators of this family share (:func:`int64_input`).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..context import Context, Node
from ..registry import translator

__all__ = ["int64_input", "int64_vector", "scalar_const"]


def int64_input(node: Node, ctx: Context, i: int) -> str:
    """Input ``i`` as int64 (ONNX wants int64 shapes, axes and indices; OpenVINO takes any integer type)."""
    if node.input_type(i).name == "i64":
        return node.inputs[i]
    value = node.const(i)
    if value is not None:
        return ctx.b.const(np.asarray(value).astype(np.int64))
    return ctx.b.op("Cast", [node.inputs[i]], {"to": TensorProto.INT64})


def int64_vector(node: Node, ctx: Context, i: int) -> str:
    """Input ``i`` as a 1-D int64 tensor (OpenVINO often allows a scalar where ONNX wants ``[n]``)."""
    value = node.const(i)
    if value is not None:
        return ctx.b.const(np.asarray(value).astype(np.int64).reshape(-1))
    return ctx.b.op("Reshape", [int64_input(node, ctx, i), ctx.b.const(np.array([-1], np.int64))])


def scalar_const(node: Node, i: int, what: str) -> int:
    """Input ``i`` as one constant integer (an axis OpenVINO passes as an input but ONNX as an attribute)."""
    values = node.const_ints(i, what)
    if len(values) != 1:
        raise node.error(f"input {i} ({what}) expected one value, got {len(values)}")
    return values[0]


def _static_dim(node: Node, i: int, axis: int) -> int | None:
    """Dim ``axis`` (already non-negative) of input ``i`` when the IR port states it, else None."""
    dims = node.input_shape(i).dims
    if dims is None or not 0 <= axis < len(dims) or not dims[axis].is_static:
        return None
    return dims[axis].lo


@translator("Concat", 1)
def concat_v1(node: Node, ctx: Context) -> list[str]:
    """Concat-1 -> Concat; ``axis`` may be negative in both."""
    return [ctx.b.op("Concat", node.inputs, {"axis": node.attr_int("axis")})]


@translator("Reshape", 1)
def reshape_v1(node: Node, ctx: Context) -> list[str]:
    """Reshape-1 -> Reshape. In the target shape -1 infers a dim in both; a 0 copies the input dim when
    ``special_zero`` is true (ONNX ``allowzero=0``) and is a zero-sized dim when false (``allowzero=1``)."""
    special_zero = node.attr_bool("special_zero")
    shape = int64_vector(node, ctx, 1)
    known = node.const(1)
    copies_nothing = known is not None and 0 not in np.asarray(known).reshape(-1)
    attrs = {} if special_zero or copies_nothing else {"allowzero": 1}
    return [ctx.b.op("Reshape", [node.inputs[0], shape], attrs)]


@translator("Unsqueeze", 1)
def unsqueeze_v1(node: Node, ctx: Context) -> list[str]:
    """Unsqueeze-1 -> Unsqueeze. OpenVINO allows scalar axes; both count negative axes from the output rank."""
    return [ctx.b.op("Unsqueeze", [node.inputs[0], int64_vector(node, ctx, 1)])]


def _squeeze(node: Node, ctx: Context, skip_dynamic: bool) -> list[str]:
    """OpenVINO squeezes the listed axes whose dim is 1 and leaves the others as they are (since 2024.3);
    ONNX Squeeze fails on a dim that is not 1. Axes known not to be 1 in the IR are dropped here; a dynamic
    dim is squeezed as ONNX does unless ``skip_dynamic``, which decides at run time (see :func:`_squeeze_ones`)."""
    b = ctx.b
    if len(node.inputs) < 2:
        return [b.op("Squeeze", [node.inputs[0]])]
    axes_value = node.const(1)
    if axes_value is None:
        return [_squeeze_ones(node, ctx, int64_vector(node, ctx, 1))]
    axes = [int(a) for a in np.asarray(axes_value).reshape(-1)]
    if not axes:
        return [b.op("Squeeze", [node.inputs[0]])]
    rank = node.input_rank(0)
    kept: list[int] = []
    for axis in sorted({a + rank if a < 0 else a for a in axes}):
        dim = _static_dim(node, 0, axis)
        if dim is None and skip_dynamic:
            return [_squeeze_ones(node, ctx, b.const(np.array(axes, np.int64)))]
        if dim is None or dim == 1:
            kept.append(axis)
    if not kept:
        return [b.op("Identity", [node.inputs[0]])]
    return [b.op("Squeeze", [node.inputs[0], b.const(np.array(kept, np.int64))])]


def _squeeze_ones(node: Node, ctx: Context, axes: str) -> str:
    """Squeeze the dims listed in ``axes`` that are 1 at run time (all 1-dims when ``axes`` is empty)."""
    b = ctx.b
    shape = b.op("Shape", [node.inputs[0]])
    # Not Size(shape): onnxruntime 1.31's shape inference takes Size(Shape(x)) for the element count of x.
    rank = b.op("Squeeze", [b.op("Shape", [shape])])
    positions = b.op("Range", [b.const(np.array(0, np.int64)), rank, b.const(np.array(1, np.int64))])
    axes = b.op("Where", [b.op("Less", [axes, b.const(np.array(0, np.int64))]), b.op("Add", [axes, rank]), axes])
    # listed[j]: dim j is among the axes, counted as a [rank, n_axes] equality table summed over the axes.
    table = b.op("Equal", [b.op("Unsqueeze", [positions, b.const(np.array([1], np.int64))]), axes])
    hits = b.op(
        "ReduceSum",
        [b.op("Cast", [table], {"to": TensorProto.INT64}), b.const(np.array([1], np.int64))],
        {"keepdims": 0},
    )
    listed = b.op("Greater", [hits, b.const(np.array(0, np.int64))])
    no_axes = b.op("Equal", [b.op("Size", [axes]), b.const(np.array(0, np.int64))])
    drop = b.op("And", [b.op("Or", [listed, no_axes]), b.op("Equal", [shape, b.const(np.array(1, np.int64))])])
    new_shape = b.op("Compress", [shape, b.op("Not", [drop])], {"axis": 0})
    return b.op("Reshape", [node.inputs[0], new_shape], {"allowzero": 1})


@translator("Squeeze", 1)
def squeeze_v1(node: Node, ctx: Context) -> list[str]:
    """Squeeze-1: optional ``axes`` input (scalar or 1-D); no axes (or empty) squeezes every 1-dim."""
    return _squeeze(node, ctx, skip_dynamic=False)


@translator("Squeeze", 15)
def squeeze_v15(node: Node, ctx: Context) -> list[str]:
    """Squeeze-15: as Squeeze-1; with ``allow_axis_skip`` a listed dynamic dim is kept if it is not 1 at run time."""
    return _squeeze(node, ctx, skip_dynamic=node.attr_bool("allow_axis_skip", False))


@translator("Transpose", 1)
def transpose_v1(node: Node, ctx: Context) -> list[str]:
    """Transpose-1 -> Transpose with ``perm`` = ``input_order`` (output dim k is input dim order[k]);
    an empty order reverses the dims, as ONNX does without ``perm``. A run-time order, which ONNX cannot
    take as an attribute, is applied by gathering through index grids (:func:`_transpose_runtime`)."""
    b = ctx.b
    order = node.const(1)
    if order is None:
        length = node.input_shape(1).to_list()
        if not length or length[0] < 0:
            raise node.error("a run-time input_order needs a static length")
        if length[0] == 0:
            return [b.op("Transpose", [node.inputs[0]])]
        return [_transpose_runtime(node, ctx, length[0])]
    perm = [int(v) for v in np.asarray(order).reshape(-1)]
    if not perm:
        return [b.op("Transpose", [node.inputs[0]])]
    rank = len(perm)
    perm = [p + rank if p < 0 else p for p in perm]
    if sorted(perm) != list(range(rank)):
        # onnxruntime aborts kernel creation on such a perm without naming the node.
        raise node.error(f"input_order {[int(v) for v in np.asarray(order).reshape(-1)]} is not a permutation")
    return [b.op("Transpose", [node.inputs[0]], {"perm": perm})]


def _transpose_runtime(node: Node, ctx: Context, rank: int) -> str:
    """out[i_0..i_{r-1}] = x[j] with j[order[k]] = i_k: build the output's coordinate grid, permute its last
    axis by the inverse order and GatherND."""
    b = ctx.b
    order = int64_input(node, ctx, 1)
    out_shape = b.op("Gather", [b.op("Shape", [node.inputs[0]]), order])
    coords = []
    for k in range(rank):
        size = b.op("Gather", [out_shape, b.const(np.array(k, np.int64))])
        steps = b.op("Range", [b.const(np.array(0, np.int64)), size, b.const(np.array(1, np.int64))])
        along_k = b.op("Reshape", [steps, b.const(np.array([-1 if a == k else 1 for a in range(rank)], np.int64))])
        grid = b.op("Expand", [along_k, out_shape])
        coords.append(b.op("Unsqueeze", [grid, b.const(np.array([-1], np.int64))]))
    out_coords = b.op("Concat", coords, {"axis": -1})
    identity = b.const(np.arange(rank, dtype=np.int64))
    inverse = b.op("ScatterElements", [identity, order, identity])
    in_coords = b.op("Gather", [out_coords, inverse], {"axis": -1})
    return b.op("GatherND", [node.inputs[0], in_coords])


@translator("Split", 1)
def split_v1(node: Node, ctx: Context) -> list[str]:
    """Split-1 -> Split into ``num_splits`` equal parts along a constant ``axis`` input."""
    axis = scalar_const(node, 1, "axis")
    count = node.attr_int("num_splits")
    if count != len(node.layer.outputs):
        raise node.error(f"num_splits={count} but the layer has {len(node.layer.outputs)} outputs")
    return _as_list(ctx.b.op("Split", [node.inputs[0]], {"axis": axis, "num_outputs": count}, outputs=count))


@translator("VariadicSplit", 1)
def variadic_split_v1(node: Node, ctx: Context) -> list[str]:
    """VariadicSplit-1 -> Split with a ``split`` input. One length may be -1 (the rest of the axis), which
    ONNX does not allow: it becomes ``dim - sum(other lengths)``, at run time when the dim is dynamic."""
    b = ctx.b
    axis = scalar_const(node, 1, "axis")
    count = len(node.layer.outputs)
    lengths = node.const(2)
    if lengths is not None:
        sizes = [int(v) for v in np.asarray(lengths).reshape(-1)]
        if len(sizes) != count:
            raise node.error(f"split_lengths has {len(sizes)} values but the layer has {count} outputs")
        rank = node.input_rank(0)
        dim = _static_dim(node, 0, axis + rank if axis < 0 else axis)
        if -1 in sizes and dim is not None:
            sizes[sizes.index(-1)] = dim - (sum(sizes) + 1)
        if -1 not in sizes:
            split = b.const(np.array(sizes, np.int64))
            return _as_list(b.op("Split", [node.inputs[0], split], {"axis": axis}, outputs=count))
    # sum(lengths) + 1 is the sum of the others where one length is -1.
    given = int64_vector(node, ctx, 2)
    dim = b.op("Gather", [b.op("Shape", [node.inputs[0]]), b.const(np.array(axis, np.int64))])
    rest = b.op("Sub", [dim, b.op("Add", [b.op("ReduceSum", [given]), b.const(np.array(1, np.int64))])])
    split = b.op("Where", [b.op("Equal", [given, b.const(np.array(-1, np.int64))]), rest, given])
    return _as_list(b.op("Split", [node.inputs[0], split], {"axis": axis}, outputs=count))


def _as_list(outs: str | list[str]) -> list[str]:
    return outs if isinstance(outs, list) else [outs]


@translator("Tile", 1)
def tile_v1(node: Node, ctx: Context) -> list[str]:
    """Tile-1 -> Tile. OpenVINO aligns ``repeats`` and the data rank by prepending 1s to the shorter (a
    longer ``repeats`` adds leading dims); ONNX needs len(repeats) == rank, so the shorter side is padded."""
    b = ctx.b
    rank = node.input_rank(0)
    repeats = int64_vector(node, ctx, 1)
    known = node.const(1)
    count = int(np.asarray(known).size) if known is not None else (node.input_shape(1).to_list() or [-1])[0]
    if count < 0:
        raise node.error("repeats needs a static length")
    data = node.inputs[0]
    if count > rank:
        data = b.op("Unsqueeze", [data, b.const(np.arange(count - rank, dtype=np.int64))])
    elif count < rank:
        repeats = b.op("Concat", [b.const(np.ones(rank - count, np.int64)), repeats], {"axis": 0})
    return [b.op("Tile", [data, repeats])]

"""Recognise OpenVINO's compressed weights, so they reach ONNX compressed instead of folded to f32.

``ov.save_model`` and NNCF (optimum-intel's ``--weight-format``) write a weight as a chain of
constants that OpenVINO's CPU plugin decompresses on the fly:

- f16/bf16: ``Convert(Const f16|bf16 -> f32)``;
- int8 per output channel: ``Convert(Multiply(Subtract(Convert(Const u8|i8), zero point), scale))``
  (symmetric ones have no ``Subtract``);
- int4 in groups along the reduction axis: the same on ``u4``/``i4`` constants shaped
  ``[N, groups, group]`` with a ``Reshape`` to ``[N, K]`` (``[groups, group, N]`` to ``[K, N]``
  when MatMul does not transpose the weight), scales and zero points ``[N, groups, 1]``.

Such a chain is read as a :class:`~.weights.QuantizedWeight` (large f16/bf16 constants as a
:class:`~.weights.FloatWeight`), codes keeping their stored bytes where the layout allows. Anything
else (nf4, f8, codebooks, scales varying inside a group) is not recognised and is folded to f32
(see ``folding``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...ir import Graph, Layer
from ...ir.walk import upstream
from ..folding import constant_value
from .weights import FloatWeight, QuantizedWeight

__all__ = ["WeightPlan", "plan_weights", "weight_source"]

_BITS = {"u4": 4, "i4": 4, "u8": 8, "i8": 8}
# f16/bf16 constants smaller than this are folded to f32 (biases, norms, rotary tables): only
# weights are worth a Cast node.
MIN_FLOAT_WEIGHT = 1024


@dataclass
class WeightPlan:
    """What one graph's weights become: ``weights`` by chain-end layer id, and the chain layers
    whose values nothing else needs (the driver skips them)."""

    weights: dict[int, QuantizedWeight | FloatWeight]
    skipped: set[int]


_plans: weakref.WeakKeyDictionary[Graph, WeightPlan] = weakref.WeakKeyDictionary()


def plan_weights(graph: Graph) -> WeightPlan:
    """Find every compressed weight a consumer can take compressed (memoised per graph)."""
    plan = _plans.get(graph)
    if plan is None:
        plan = _plan(graph)
        _plans[graph] = plan
    return plan


def _plan(graph: Graph) -> WeightPlan:
    weights: dict[int, QuantizedWeight | FloatWeight] = {}
    order = graph.topological()
    for layer in order:
        if layer.type in ("Convert", "Multiply", "Reshape") and len(layer.outputs) == 1:
            found = _quantized_for_consumers(graph, layer)
            if found is not None:
                weights[layer.id] = found
    skipped = set(weights)  # a quantized chain yields no value: its consumers read it compressed
    _skip_feeders(graph, order, weights, skipped)
    for layer in order:
        if layer.id not in skipped and (found_float := _float(graph, layer)) is not None:
            weights[layer.id] = found_float
    _skip_feeders(graph, order, weights, skipped)
    return WeightPlan(weights, skipped)


def _skip_feeders(graph: Graph, order: list[Layer], weights: dict, skipped: set[int]) -> None:
    """Add to ``skipped`` every chain layer whose consumers are all weights or skipped."""
    for layer in reversed(order):  # consumers before producers
        if layer.id in weights or layer.id in skipped or layer.type not in _CHAIN_OPS:
            continue
        consumers = [dst for i in range(len(layer.outputs)) for dst, _ in graph.consumers(layer, i)]
        if consumers and all(dst.id in weights or dst.id in skipped for dst in consumers):
            skipped.add(layer.id)


_CHAIN_OPS = frozenset({"Const", "Convert", "Subtract", "Multiply", "Reshape"})


def weight_source(graph: Graph, layer: Layer) -> str:
    """The element types of the constants a folded value comes from (``u4+f16``), for reports."""

    def inputs(src: Layer) -> range:
        return range(len(src.inputs) if src.type in _CHAIN_OPS or src.type in _SOURCE_OPS else 0)

    types = {
        src.attrs.get("element_type", "?")
        for src in upstream(graph, [layer], inputs)
        if src.type == "Const" and src.attrs.get("element_type") not in ("i32", "i64")  # not shapes
    }
    return "+".join(sorted(types))


_SOURCE_OPS = frozenset({"Transpose", "Unsqueeze", "Squeeze", "Add"})


# -- f16/bf16 -----------------------------------------------------------------------------------
def _float(graph: Graph, layer: Layer) -> FloatWeight | None:
    if layer.type != "Convert" or layer.attrs.get("destination_type", "").lower() != "f32":
        return None
    src = graph.producer(layer, 0)[0]
    if src.type != "Const" or src.attrs.get("element_type", "").lower() not in ("f16", "bf16"):
        return None
    value = graph.constant(src)
    if value.size < MIN_FLOAT_WEIGHT:
        return None
    return FloatWeight(layer, value, f"{src.attrs['element_type'].lower()} {'x'.join(map(str, value.shape))}")


# -- quantized ----------------------------------------------------------------------------------
def _quantized_for_consumers(graph: Graph, layer: Layer) -> QuantizedWeight | None:
    """The weight ``layer`` ends, if every consumer takes it in one orientation we can emit, as
    f32: a chain ending in f16 (for an f16 MatMul) rounds each value to f16, which blocked codes
    and scales cannot say; it is folded to f32 instead."""
    etype = layer.outputs[0].element_type
    if etype is not None and etype.name != "f32":
        return None
    consumers = graph.consumers(layer, 0)
    orientations = {_orientation(graph, dst, index) for dst, index in consumers}
    if not consumers or len(orientations) != 1 or None in orientations:
        return None
    (k_axis,) = orientations
    return _quantized(graph, layer, k_axis)


def _orientation(graph: Graph, consumer: Layer, index: int) -> int | None:
    """Which axis of the 2-D weight a consumer reduces over (1: ``[rows, k]``), None if it cannot
    take a compressed weight: MatMul's B without ``transpose_a``, Gather's data on axis 0."""
    attrs = consumer.attrs
    if consumer.type == "MatMul" and index == 1 and attrs.get("transpose_a", "false").lower() == "false":
        return 1 if attrs.get("transpose_b", "false").lower() == "true" else 0
    if consumer.type == "Gather" and index == 0 and int(attrs.get("batch_dims", "0") or 0) == 0:
        axis = constant_value(graph, graph.producer(consumer, 2)[0]) if len(consumer.inputs) > 2 else None
        if axis is not None and axis.size == 1 and int(axis.reshape(-1)[0]) in (0, -2):
            return 1
    return None


def _strip_convert(graph: Graph, layer: Layer, to: tuple[str, ...] = ("f32", "f16")) -> Layer:
    while layer.type == "Convert" and layer.attrs.get("destination_type", "").lower() in to:
        layer = graph.producer(layer, 0)[0]
    return layer


def _quantized(graph: Graph, end: Layer, k_axis: int) -> QuantizedWeight | None:
    layer = _strip_convert(graph, end)
    target: list[int] | None = None
    if layer.type == "Reshape":
        shape = constant_value(graph, graph.producer(layer, 1)[0])
        if shape is None or shape.size != 2 or np.any(shape <= 0):
            return None
        target = [int(d) for d in shape]
        layer = _strip_convert(graph, graph.producer(layer, 0)[0])
    if layer.type != "Multiply" or layer.attrs.get("auto_broadcast", "numpy").lower() != "numpy":
        return None
    for centered_index in (0, 1):
        found = _centered(graph, graph.producer(layer, centered_index)[0])
        if found is None:
            continue
        # Only now: the other input is the scale (small), never the weight folded to f32.
        scale = constant_value(graph, graph.producer(layer, 1 - centered_index)[0])
        if scale is not None and scale.dtype.kind == "f":
            return _blocked(graph, end, found[0], found[1], scale, target, k_axis)
    return None


def _centered(graph: Graph, layer: Layer) -> tuple[Layer, np.ndarray | None] | None:
    """``(codes Const, zero point or None)`` for ``Subtract(Convert(codes), zp)`` or ``Convert(codes)``."""
    while layer.type == "Convert" and graph.producer(layer, 0)[0].type != "Const":
        layer = _strip_convert(graph, layer)  # a widening Convert after the Subtract
        if layer.type == "Convert":
            break
    zero_point = None
    if layer.type == "Subtract" and layer.attrs.get("auto_broadcast", "numpy").lower() == "numpy":
        zero_point = constant_value(graph, graph.producer(layer, 1)[0])
        if zero_point is None:
            return None
        layer = graph.producer(layer, 0)[0]
    if layer.type != "Convert" or layer.attrs.get("destination_type", "").lower() not in ("f16", "f32"):
        return None
    codes = graph.producer(layer, 0)[0]
    if codes.type != "Const" or codes.attrs.get("element_type", "").lower() not in _BITS:
        return None
    return codes, zero_point


def _blocked(
    graph: Graph,
    end: Layer,
    codes_layer: Layer,
    zero_point: np.ndarray | None,
    scale: np.ndarray,
    target: list[int] | None,
    k_axis: int,
) -> QuantizedWeight | None:
    etype = codes_layer.attrs["element_type"].lower()
    bits, signed = _BITS[etype], etype.startswith("i")
    packed = graph.packed(codes_layer)
    stored = tuple(packed.shape) if packed is not None else graph.constant(codes_layer).shape
    layout = _layout(stored, target, k_axis)
    if layout is None:
        return None
    rows, groups, group, per_group = layout
    k = groups * group
    block = _block(groups, group, k)
    if rows == 0 or k == 0 or block is None:
        return None
    scale_g = _per_group(scale.astype(np.float32), len(stored), per_group, k_axis)
    offset = 1 << (bits - 1) if signed else 0
    zp_g = _zero_points(zero_point, len(stored), per_group, k_axis, bits, offset)
    if scale_g is None or zp_g is None:
        return None
    raw = packed.raw if packed is not None and k_axis == 1 else None  # [groups, group, rows]: transposed
    packed_rows = _packed_rows(raw, bits, rows, k)
    sym = "sym" if zero_point is None or np.all(zp_g == offset) else "asym"
    kind = "per-channel" if groups == 1 else f"g{group}"
    return QuantizedWeight(
        layer=end,
        bits=bits,
        signed=signed,
        rows=rows,
        k=k,
        group=group,
        block=block,
        scale=scale_g,
        zero_point=zp_g.astype(np.uint8),
        source=f"{etype} {kind} {sym} {rows}x{k}",
        stored_bytes=(rows * k * bits + 7) // 8,
        stored_codes=_codes_reader(graph, codes_layer, k_axis, rows, k),
        packed=packed_rows,
    )


def _layout(
    stored: tuple[int, ...], target: list[int] | None, k_axis: int
) -> tuple[int, int, int, tuple[int, int, int]] | None:
    """``(rows, groups, group, per-group shape)`` of codes stored as ``stored`` (Reshaped to
    ``target``, if any): canonically ``[rows, groups, group]`` (k_axis 1) or ``[groups, group,
    rows]`` (k_axis 0); None for any other layout."""
    if target is None:
        if len(stored) != 2:
            return None
        layout = (stored[0], 1, stored[1]) if k_axis == 1 else (1, stored[0], stored[1])
    else:
        if len(stored) != 3:
            return None
        merged = [stored[0], stored[1] * stored[2]] if k_axis == 1 else [stored[0] * stored[1], stored[2]]
        if merged != target:
            return None
        layout = tuple(stored)
    if k_axis == 1:
        rows, groups, group = layout
        return rows, groups, group, (rows, groups, 1)
    groups, group, rows = layout
    return rows, groups, group, (groups, 1, rows)


def _zero_points(
    zero_point: np.ndarray | None, rank: int, per_group: tuple[int, ...], k_axis: int, bits: int, offset: int
) -> np.ndarray | None:
    """The zero points as ``[rows, groups]`` int64 in the unsigned form (``offset`` added; the
    offset itself without any), or None: not one integer per group, or out of the codes' range."""
    if zero_point is None:
        rows_groups = (per_group[0], per_group[1]) if k_axis == 1 else (per_group[2], per_group[0])
        return np.full(rows_groups, offset, np.int64)
    zp = _per_group(zero_point, rank, per_group, k_axis)
    if zp is None or not np.all(np.isfinite(zp)) or np.any(zp != np.round(zp)):
        return None
    zp_g = zp.astype(np.int64) + offset
    if zp_g.min() < 0 or zp_g.max() >= 1 << bits:
        return None
    return zp_g


def _codes_reader(graph: Graph, codes_layer: Layer, k_axis: int, rows: int, k: int) -> Callable[[], np.ndarray]:
    """A reader of the ``[rows, k]`` codes as stored (of ``[groups, group, rows]`` codes: a
    transposed copy). It holds the graph's constants, not the graph: the plan it belongs to is
    memoised per graph in a ``WeakKeyDictionary``, whose values must not keep their key (and its
    mapped ``.bin``) alive."""
    constants = graph.constants
    if k_axis == 0:

        def stored_codes() -> np.ndarray:
            return np.ascontiguousarray(constants[codes_layer.id].reshape(k, rows).T)

    else:

        def stored_codes() -> np.ndarray:
            return constants[codes_layer.id].reshape(rows, k)

    return stored_codes


def _block(groups: int, group: int, k: int) -> int | None:
    """ONNX Runtime's block size: a power of two >= 16 (MatMulNBits, GatherBlockQuantized), at most
    128 (what NNCF's int4 uses, and the fastest MLAS 4-bit kernel measured here). A group larger
    than the block repeats its scale in each of its blocks, which is exact; per channel the last
    block may be partial (padded). None: groups too small for any block."""
    for block in (128, 64, 32, 16):
        if (k if groups == 1 else group) % block == 0:
            return block
    if groups == 1:
        return min(128, max(16, 1 << (k - 1).bit_length()))
    return None


def _packed_rows(raw: np.ndarray | None, bits: int, rows: int, k: int) -> np.ndarray | None:
    """The stored 4-bit bytes as ``[rows, k / 2]`` when every row starts on a byte (k even)."""
    if raw is None or bits != 4 or k % 2:
        return None
    return raw[: rows * k // 2].reshape(rows, k // 2)


def _per_group(value: np.ndarray, rank: int, per_group: tuple[int, ...], k_axis: int) -> np.ndarray | None:
    """``value`` (broadcast against the stored codes) as ``[rows, groups]``; None if it varies
    within a group or does not broadcast."""
    value = np.asarray(value)
    if value.ndim > rank:
        if any(d != 1 for d in value.shape[: value.ndim - rank]):
            return None
        value = value.reshape(value.shape[value.ndim - rank :])
    value = value.reshape((1,) * (rank - value.ndim) + value.shape)
    if rank == 2:  # per channel: constant along k, i.e. [rows, 1] (k_axis 1) or [1, rows] (k_axis 0)
        if value.shape[k_axis] != 1:
            return None
        value = value.reshape(value.shape[0], 1, 1) if k_axis == 1 else value.reshape(1, 1, value.shape[1])
    try:
        full = np.broadcast_to(value, np.broadcast_shapes(value.shape, per_group))
    except ValueError:
        return None
    if full.shape != per_group:
        return None  # it varies along the group (or broadcasts the codes bigger)
    if k_axis == 1:
        return np.ascontiguousarray(full[:, :, 0])
    return np.ascontiguousarray(full[:, 0, :].T)

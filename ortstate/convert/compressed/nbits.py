"""A compressed weight's initializers in a graph, as ONNX Runtime's contrib ops take them, and the
``MatMulNBits`` node that reads them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..builder import GraphBuilder
from . import pack
from .weights import QuantizedWeight

__all__ = [
    "MS_DOMAIN",
    "NBitsInputs",
    "dequantized_matmul",
    "gather_inputs",
    "matmul_nbits",
    "nibble_inputs",
    "stacked_inputs",
]

MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class NBitsInputs:
    """A contrib op's weight inputs (data, scales and, unless all default, zero points), its
    attributes (no ``accuracy_level``: each call picks its own), and whether they are an 8-bit
    weight's 4-bit nibble halves, whose two results add."""

    names: tuple[str, ...]
    attrs: dict[str, Any]
    nibbles: bool = False


def _scales_and_zero_points(
    b: GraphBuilder, data: str, hint: str, scale: np.ndarray, zp: np.ndarray | None
) -> tuple[str, ...]:
    names = (data, b.const(scale, hint=f"{hint}_scale"))
    return names if zp is None else (*names, b.const(zp, hint=f"{hint}_zero_point"))


def stacked_inputs(b: GraphBuilder, weights: Sequence[QuantizedWeight], bits: int) -> NBitsInputs:
    """One ``MatMulNBits``' inputs for ``weights`` (all ``bits`` wide, one block and K) stacked by
    rows, their codes as stored (:func:`~.pack.stacked_codes`)."""
    w0 = weights[0]
    hint = w0.layer.name if len(weights) == 1 else f"{w0.layer.name}+{len(weights) - 1}"
    shape = pack.stacked_shape(weights, bits)
    data = b.lazy_const(shape, np.uint8, partial(pack.stacked_codes, weights, bits), hint)
    zp = pack.zero_point_bytes(pack.block_zero_points(weights), bits)
    scale = pack.block_scales(weights).reshape(-1)
    names = _scales_and_zero_points(b, data, hint, scale, None if zp is None else zp.reshape(-1))
    return NBitsInputs(names, {"K": w0.k, "N": shape[0], "bits": bits, "block_size": w0.block})


def nibble_inputs(b: GraphBuilder, w: QuantizedWeight) -> NBitsInputs:
    """An 8-bit weight as one 4-bit ``MatMulNBits`` over twice its rows, high nibbles (scale
    ``16 s``) above low ones (scale ``s``): ``q - zp = 16 (hi - zp_hi) + (lo - zp_lo)``."""
    hint = w.layer.name
    shape = (2 * w.rows, w.blocks, w.block // 2)
    data = b.lazy_const(shape, np.uint8, partial(pack.nibble_codes, w), hint)
    zp = pack.zero_point_bytes(pack.nibble_zero_points(w), 4)
    scale = pack.nibble_scales(w).reshape(-1)
    names = _scales_and_zero_points(b, data, hint, scale, None if zp is None else zp.reshape(-1))
    return NBitsInputs(names, {"K": w.k, "N": 2 * w.rows, "bits": 4, "block_size": w.block}, nibbles=True)


def gather_inputs(b: GraphBuilder, w: QuantizedWeight) -> NBitsInputs:
    """``GatherBlockQuantized``' inputs for a table ``w``: its rows quantized along ``k``."""
    bits = pack.gather_bits(w)
    shape = (w.rows, w.k // 2 if bits == 4 else w.k)
    data = b.lazy_const(shape, np.uint8, partial(pack.gather_codes, w), w.layer.name)
    zp = pack.zero_point_bytes(pack.block_zero_points([w]), bits)
    names = _scales_and_zero_points(b, data, w.layer.name, pack.block_scales([w]), zp)
    return NBitsInputs(names, {"bits": bits, "block_size": w.block, "gather_axis": 0, "quantize_axis": 1})


def matmul_nbits(graph: GraphBuilder, a: str, inputs: NBitsInputs, accuracy_level: int) -> str:
    """``MatMulNBits(a, *inputs)`` appended to ``graph``, plus the add of nibble halves."""
    attrs = {**inputs.attrs, "accuracy_level": accuracy_level}
    out = graph.op("MatMulNBits", [a, *inputs.names], attrs, domain=MS_DOMAIN)
    if not inputs.nibbles:
        return out
    high, low = graph.op("Split", [out], {"axis": -1, "num_outputs": 2}, outputs=2)
    return graph.op("Add", [high, low])


def dequantized_matmul(graph: GraphBuilder, consts: GraphBuilder, a: str, inputs: NBitsInputs) -> str:
    """``a @ W^T`` for stacked 8-bit ``inputs``, the weight dequantized to f32 in the run
    (``DequantizeLinear`` blocked along K, opset 21: ONNX Runtime folds no ``DequantizeLinear`` at
    load, so the f32 copy lives only during the run) and multiplied in f32 (``FusedMatMul``)."""
    rows, k, block = inputs.attrs["N"], inputs.attrs["K"], inputs.attrs["block_size"]
    blocks = -(-k // block)
    per_block = consts.const(np.array([rows, blocks, 1], np.int64), hint="per_block")
    scale = graph.op("Reshape", [inputs.names[1], per_block])
    if len(inputs.names) > 2:
        zero_point = graph.op("Reshape", [inputs.names[2], per_block])
    else:  # MatMulNBits' default for 8 bits
        zero_point = graph.op("Expand", [consts.const(np.uint8(128), hint="zp128"), per_block])
    weight = graph.op("DequantizeLinear", [inputs.names[0], scale, zero_point], {"axis": 2, "block_size": block})
    flat = graph.op("Reshape", [weight, consts.const(np.array([rows, blocks * block], np.int64), hint="flat")])
    if blocks * block != k:  # per channel with K not a multiple of the block: the last block is padded
        zero, end = consts.const(np.array([0], np.int64), hint="zero"), consts.const(np.array([k], np.int64), hint="k")
        flat = graph.op("Slice", [flat, zero, end, consts.const(np.array([-1], np.int64), hint="axis_m1")])
    return graph.op("FusedMatMul", [a, flat], {"transB": 1}, domain=MS_DOMAIN)

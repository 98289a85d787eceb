"""Compressed weights as ONNX Runtime runs them: MatMulNBits, GatherBlockQuantized, f16 + Cast.

Why these ops, measured with ``benchmarks/weights_kernels.py`` (ONNX Runtime 1.31 CPU, AVX2):

- ``com.microsoft`` ``MatMulNBits`` is emitted directly rather than standard blocked
  ``DequantizeLinear`` + ``MatMul``: ONNX Runtime fuses the latter into the same kernel, but at
  ``session.qdq_matmulnbits_accuracy_level``, whose default 4 quantizes the activations to int8
  (logits move ~1e-2 from OpenVINO's exact results), and a plain ONNX Runtime user would not know
  to set it. Written directly, ``accuracy_level`` 0 computes ``(q - zp) * scale`` in f32 exactly
  as OpenVINO's CPU plugin does; the file also keeps OpenVINO's ``[N, K]`` layout (DQ's blocked
  form is ``[K, N]``: a transpose at conversion and another when ORT fuses it).
- 4-bit codes go in as stored: OpenVINO packs u4 two a byte, the first value in the low nibble,
  which is ``MatMulNBits``' ``B`` layout, so the bytes are the ``.bin``'s (i4 flips each nibble's
  top bit: ``q + 8``).
- 8-bit weights: ONNX Runtime 1.31 has no f32-compute 8-bit kernel on x86 (``MatMulNBits`` bits=8
  at ``accuracy_level`` 0 dequantizes all of B on every call: ~20x slower than f32 MatMul). So
  an int8 weight runs as one 4-bit ``MatMulNBits`` over twice the rows, its high and low nibbles:
  ``q - zp = 16 (hi - zp_hi) + (lo - zp_lo)`` with ``zp = 16 zp_hi + zp_lo``, scales ``16 s`` and
  ``s``, then the two halves added. Every dequantized value is exact in f32; the memory is the
  int8 weight's. With ``int8_activations`` (an explicit option, what OpenVINO's default CPU
  config does) int8 runs as ``MatMulNBits`` bits=8 and int4 at ``accuracy_level`` 4.
- Embeddings: ``GatherBlockQuantized`` dequantizes the gathered rows in f32 and gives zeros for
  out-of-range indices (negative ones count from the end): OpenVINO's Gather-8, with no guard.
- f16/bf16 weights stay in their type in the file and reach f32 through a Cast (which ONNX
  Runtime folds at load for a MatMul: its CPU provider has no f32-activation kernel over f16
  weights); a Gather gathers the f16 rows first, so tables stay f16 in memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from .context import Context, Node
from .weights import FloatWeight, QuantizedWeight

__all__ = ["MS_DOMAIN", "float_weight", "gather_quantized", "matmul_quantized"]

MS_DOMAIN = "com.microsoft"


def _pack4(values: np.ndarray) -> np.ndarray:
    """Two 4-bit values a byte along the last axis (padded to even), the first in the low nibble."""
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.zeros(values.shape[:-1] + (1,), values.dtype)], axis=-1)
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def _blocks(w: QuantizedWeight) -> int:
    return -(-w.k // w.block)


def _per_block(value: np.ndarray, w: QuantizedWeight) -> np.ndarray:
    """``[rows, groups]`` -> ``[rows, blocks]``: each group's value repeated in each of its blocks."""
    repeat = _blocks(w) if w.groups == 1 else w.group // w.block
    return np.repeat(value, repeat, axis=1)


def _blocked_codes(codes: np.ndarray, w: QuantizedWeight) -> np.ndarray:
    """``[rows, k]`` codes padded to whole blocks: ``[rows, blocks, block]``."""
    pad = _blocks(w) * w.block - w.k
    if pad:
        codes = np.pad(codes, ((0, 0), (0, pad)))
    return codes.reshape(codes.shape[0], _blocks(w), w.block)


_CHUNK = 4096  # rows transformed at a time: a 151936-row LM head never exists in more than one copy


def _by_rows(w: QuantizedWeight, shape: tuple[int, ...], fill: Any) -> Any:
    """A ``make`` for :meth:`GraphBuilder.lazy_const`: a ``uint8`` array of ``shape`` whose rows
    ``[start, stop)`` of the weight ``fill(start, stop)`` computes, a chunk at a time."""

    def make() -> np.ndarray:
        out = np.empty(shape, np.uint8)
        for start in range(0, w.rows, _CHUNK):
            fill(out, start, min(start + _CHUNK, w.rows))
        return out

    return make


def _record(ctx: Context, w: QuantizedWeight | FloatWeight, how: str, names: list[str]) -> None:
    ctx.record_weight(w.layer.name, w.source, how, names)


def matmul_quantized(node: Node, ctx: Context, w: QuantizedWeight) -> str:
    """``A @ W^T`` for a quantized ``W [N, K]`` (MatMul's B, either orientation)."""
    int8_act = ctx.options.int8_activations
    key = (w.layer.id, "matmul", int8_act)
    if key not in ctx.emitted:
        ctx.emitted[key] = _matmul_inputs(ctx, w, int8_act)
    inputs, attrs, split = ctx.emitted[key]
    out = ctx.b.op("MatMulNBits", [node.inputs[0], *inputs], attrs, domain=MS_DOMAIN)
    if not split:
        return out
    high, low = ctx.b.op("Split", [out], {"axis": -1, "num_outputs": 2}, outputs=2)
    return ctx.b.op("Add", [high, low])


def _matmul_inputs(ctx: Context, w: QuantizedWeight, int8_act: bool) -> tuple[list[str], dict[str, Any], bool]:
    b, hint, blocks = ctx.b, w.layer.name, _blocks(w)
    scale, zp = _per_block(w.scale, w), _per_block(w.zero_point, w)
    if w.bits == 8 and int8_act:

        def fill8(out: np.ndarray, start: int, stop: int) -> None:
            out[start:stop] = _blocked_codes(w.codes(start, stop), w)

        shape = (w.rows, blocks, w.block)
        data = b.lazy_const(shape, np.uint8, _by_rows(w, shape, fill8), hint)
        names = [data, b.const(scale.reshape(-1), hint=f"{hint}_scale")]
        if np.any(zp != 128):
            names.append(b.const(zp.reshape(-1), hint=f"{hint}_zero_point"))
        attrs = {"K": w.k, "N": w.rows, "bits": 8, "block_size": w.block, "accuracy_level": 4}
        _record(ctx, w, f"MatMulNBits 8-bit block {w.block}, int8 activations", names)
        return names, attrs, False
    split = w.bits == 8
    rows = 2 * w.rows if split else w.rows
    shape = (rows, blocks, w.block // 2)
    if split:  # high nibbles (scale 16 s) above low nibbles (scale s): see the module docstring

        def fill_split(out: np.ndarray, start: int, stop: int) -> None:
            codes = w.codes(start, stop)
            out[start:stop] = _pack4(_blocked_codes(codes >> 4, w))
            out[w.rows + start : w.rows + stop] = _pack4(_blocked_codes(codes & 15, w))

        data = b.lazy_const(shape, np.uint8, _by_rows(w, shape, fill_split), hint)
        scale = np.concatenate([scale * 16, scale])
        zp = np.concatenate([zp >> 4, zp & 15])
    elif w.packed is not None and w.k % w.block == 0:  # the .bin's bytes (i4: each nibble + 8)
        packed = w.packed_unsigned if w.signed else (lambda: w.packed)
        data = b.lazy_const(shape, np.uint8, lambda: packed().reshape(shape), hint)
    else:

        def fill4(out: np.ndarray, start: int, stop: int) -> None:
            out[start:stop] = _pack4(_blocked_codes(w.codes(start, stop), w))

        data = b.lazy_const(shape, np.uint8, _by_rows(w, shape, fill4), hint)
    names = [data, b.const(scale.reshape(-1), hint=f"{hint}_scale")]
    if np.any(zp != 8):
        names.append(b.const(_pack4(zp).reshape(-1), hint=f"{hint}_zero_point"))
    acc = 4 if int8_act else 0
    attrs = {"K": w.k, "N": rows, "bits": 4, "block_size": w.block, "accuracy_level": acc}
    what = "int8 as 4-bit high/low nibbles" if split else "4-bit"
    suffix = ", int8 activations" if int8_act else ""
    _record(ctx, w, f"MatMulNBits {what} block {w.block}{suffix}", names)
    return names, attrs, split


def gather_quantized(node: Node, ctx: Context, w: QuantizedWeight, indices: str) -> str:
    """Rows ``indices`` of a quantized table ``W [rows, k]``, dequantized in f32 (out of range: 0)."""
    key = (w.layer.id, "gather", False)
    if key not in ctx.emitted:
        ctx.emitted[key] = _gather_inputs(ctx, w)
    (data, *params), attrs, _ = ctx.emitted[key]
    return ctx.b.op("GatherBlockQuantized", [data, indices, *params], attrs, domain=MS_DOMAIN)


def _gather_inputs(ctx: Context, w: QuantizedWeight) -> tuple[list[str], dict[str, Any], bool]:
    b, hint = ctx.b, w.layer.name
    scale, zp = _per_block(w.scale, w), _per_block(w.zero_point, w)
    bits = 4 if w.bits == 4 and w.k % 2 == 0 else 8  # odd rows of 4-bit codes: one code a byte
    if bits == 4:
        packed = w.packed_unsigned if w.packed is not None else (lambda: _pack4(w.codes()))
        data = b.lazy_const((w.rows, w.k // 2), np.uint8, packed, hint)
        zp_data = _pack4(zp)
    else:
        data = b.lazy_const((w.rows, w.k), np.uint8, w.codes, hint)  # u8: the .bin's bytes
        zp_data = zp
    names = [data, b.const(scale, hint=f"{hint}_scale")]
    if np.any(zp != 1 << (bits - 1)):
        names.append(b.const(zp_data, hint=f"{hint}_zero_point"))
    attrs = {"bits": bits, "block_size": w.block, "gather_axis": 0, "quantize_axis": 1}
    _record(ctx, w, f"GatherBlockQuantized {bits}-bit block {w.block}", names)
    return names, attrs, False


def float_weight(ctx: Context, w: FloatWeight, transposed: bool = False) -> tuple[str, str]:
    """``(stored, widened)``: the f16/bf16 initializer (``transposed``: written as its transpose)
    and its Cast to f32."""
    key = (w.layer.id, "float", transposed)
    if key not in ctx.emitted:
        if transposed:
            stored = ctx.b.lazy_const(w.value.shape[::-1], w.value.dtype, lambda: w.value.T, f"{w.layer.name}_t")
        else:
            stored = ctx.b.const(w.value, hint=w.layer.name)
        widened = ctx.b.op("Cast", [stored], {"to": TensorProto.FLOAT})
        ctx.emitted[key] = ([stored, widened], {}, False)
        _record(ctx, w, f"{w.value.dtype.name} initializer + Cast", [stored])
    (stored, widened), _, _ = ctx.emitted[key]
    return stored, widened

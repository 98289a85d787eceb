"""The bytes and values of compressed weights as ONNX Runtime's contrib ops take them: pure numpy.

``MatMulNBits`` takes ``B`` as ``[N, blocks, block * bits / 8]`` bytes (4-bit codes two a byte,
the first in the low nibble: OpenVINO's own packing), scales ``[N * blocks]`` and zero points
``[N * blocks]`` (4-bit: two a byte, each row padded to a whole byte). ``GatherBlockQuantized``
takes the same per table row, unblocked. Codes are in the unsigned form (see
:class:`~.weights.QuantizedWeight`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .weights import QuantizedWeight

__all__ = [
    "CHUNK",
    "block_scales",
    "block_zero_points",
    "blocked_codes",
    "gather_bits",
    "gather_codes",
    "nibble_codes",
    "nibble_scales",
    "nibble_zero_points",
    "pack4",
    "per_block",
    "stacked_codes",
    "stacked_shape",
    "zero_point_bytes",
]

CHUNK = 4096  # rows transformed at a time: a 151936-row LM head never exists in more than one copy


def pack4(values: np.ndarray) -> np.ndarray:
    """Two 4-bit values a byte along the last axis (padded to even), the first in the low nibble."""
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.zeros(values.shape[:-1] + (1,), values.dtype)], axis=-1)
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def per_block(value: np.ndarray, w: QuantizedWeight) -> np.ndarray:
    """``[rows, groups]`` -> ``[rows, blocks]``: each group's value repeated in each of its blocks."""
    repeat = w.blocks if w.groups == 1 else w.group // w.block
    return np.repeat(value, repeat, axis=1)


def blocked_codes(codes: np.ndarray, w: QuantizedWeight) -> np.ndarray:
    """``[rows, k]`` codes padded with zeros to whole blocks: ``[rows, blocks, block]``."""
    pad = w.blocks * w.block - w.k
    if pad:
        codes = np.pad(codes, ((0, 0), (0, pad)))
    return codes.reshape(codes.shape[0], w.blocks, w.block)


def block_scales(weights: Sequence[QuantizedWeight]) -> np.ndarray:
    """The scales of ``weights`` (one block and K) stacked by rows: ``[rows, blocks]`` float32."""
    return np.concatenate([per_block(w.scale, w) for w in weights])


def block_zero_points(weights: Sequence[QuantizedWeight]) -> np.ndarray:
    """The zero points of ``weights`` stacked by rows: ``[rows, blocks]`` uint8."""
    return np.concatenate([per_block(w.zero_point, w) for w in weights])


def zero_point_bytes(zero_points: np.ndarray, bits: int) -> np.ndarray | None:
    """``[rows, blocks]`` zero points as stored (4-bit: :func:`pack4` along each row), or None when
    all are ``2**(bits - 1)``, the contrib ops' default."""
    if not np.any(zero_points != 1 << (bits - 1)):
        return None
    return pack4(zero_points) if bits == 4 else zero_points


def stacked_shape(weights: Sequence[QuantizedWeight], bits: int) -> tuple[int, int, int]:
    """``MatMulNBits``' ``B`` shape for ``weights`` stacked by rows, ``bits`` wide."""
    w0 = weights[0]
    return sum(w.rows for w in weights), w0.blocks, w0.block * bits // 8


def _stored_bytes(w: QuantizedWeight, bits: int) -> np.ndarray | None:
    """``w``'s 4-bit bytes as in the ``.bin`` (a view, unsigned form), or None (they need packing)."""
    if bits != 4 or w.packed is None or w.k % w.block:
        return None
    return w.packed_unsigned() if w.signed else w.packed


def stacked_codes(weights: Sequence[QuantizedWeight], bits: int) -> np.ndarray:
    """``MatMulNBits``' ``B`` for ``weights`` (one block and K) stacked by rows: the ``.bin``'s
    bytes where rows start on a byte (one weight: a view, no copy), else packed a chunk at a time."""
    shape = stacked_shape(weights, bits)
    if len(weights) == 1 and (view := _stored_bytes(weights[0], bits)) is not None:
        return view.reshape(shape)
    out = np.empty(shape, np.uint8)
    offset = 0
    for w in weights:
        view = _stored_bytes(w, bits)
        for start in range(0, w.rows, CHUNK):
            stop = min(start + CHUNK, w.rows)
            if view is not None:
                chunk = view[start:stop].reshape(stop - start, *shape[1:])
            else:
                codes = blocked_codes(w.codes(start, stop), w)
                chunk = pack4(codes) if bits == 4 else codes
            out[offset + start : offset + stop] = chunk
        offset += w.rows
    return out


def _by_rows(w: QuantizedWeight, shape: tuple[int, ...], fill: Callable[[np.ndarray, int, int], None]) -> np.ndarray:
    """A ``uint8`` array of ``shape`` whose rows of the weight ``fill(out, start, stop)`` writes, a
    chunk at a time."""
    out = np.empty(shape, np.uint8)
    for start in range(0, w.rows, CHUNK):
        fill(out, start, min(start + CHUNK, w.rows))
    return out


def nibble_codes(w: QuantizedWeight) -> np.ndarray:
    """An 8-bit weight as 4-bit ``B`` over twice its rows: its codes' high nibbles above their low
    ones (``q = 16 hi + lo``), ``[2 rows, blocks, block / 2]``."""

    def fill(out: np.ndarray, start: int, stop: int) -> None:
        codes = w.codes(start, stop)
        out[start:stop] = pack4(blocked_codes(codes >> 4, w))
        out[w.rows + start : w.rows + stop] = pack4(blocked_codes(codes & 15, w))

    return _by_rows(w, (2 * w.rows, w.blocks, w.block // 2), fill)


def nibble_scales(w: QuantizedWeight) -> np.ndarray:
    """The scales of :func:`nibble_codes`: ``16 s`` for the high nibbles, ``s`` for the low ones."""
    scale = per_block(w.scale, w)
    return np.concatenate([scale * 16, scale])


def nibble_zero_points(w: QuantizedWeight) -> np.ndarray:
    """The zero points of :func:`nibble_codes`: ``zp = 16 zp_hi + zp_lo``, high ones first."""
    zp = per_block(w.zero_point, w)
    return np.concatenate([zp >> 4, zp & 15])


def gather_bits(w: QuantizedWeight) -> int:
    """``GatherBlockQuantized``' bits for ``w``: 4-bit rows of odd length take one code a byte."""
    return 4 if w.bits == 4 and w.k % 2 == 0 else 8


def gather_codes(w: QuantizedWeight) -> np.ndarray:
    """``GatherBlockQuantized``' data: ``[rows, k / 2]`` bytes (4 bits), else ``[rows, k]`` codes."""
    if gather_bits(w) == 8:
        return w.codes()
    packed = w.packed_unsigned()
    return packed if packed is not None else pack4(w.codes())

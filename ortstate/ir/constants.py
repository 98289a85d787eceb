"""Decode ``Const`` layers from the ``.bin``: bounds and size checks before any allocation."""

from __future__ import annotations

import numpy as np

from ..errors import IRError
from .graph import Layer
from .shapes import parse_static_shape
from .types import ElementType

__all__ = ["decode_constant"]


def decode_constant(layer: Layer, etype: ElementType, weights: bytes, where: str) -> np.ndarray:
    """The value of a Const layer as numpy (sub-byte integers unpacked to one per byte)."""
    try:
        shape = parse_static_shape(layer.attrs.get("shape", ""))
        offset = int(layer.attrs.get("offset", "0"))
        size = int(layer.attrs.get("size", "0"))
    except ValueError as exc:
        raise IRError(f"{where}: bad Const attribute: {exc}") from None
    if offset < 0 or size < 0:
        raise IRError(f"{where}: negative offset/size ({offset}/{size})")
    if offset + size > len(weights):
        raise IRError(f"{where}: data at offset {offset} size {size} is outside the weights file ({len(weights)} bytes)")
    if etype.dtype is None:
        raise IRError(f"{where}: constants of element type {etype.name} are not supported")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    needed = (count * etype.bits + 7) // 8
    # An empty constant is written with size 0 or 1; anything else must match the shape exactly.
    if size != needed and not (count == 0 and size <= 1):
        raise IRError(f"{where}: size {size} does not match shape {list(shape)} of {etype.name} ({needed} bytes)")
    raw = np.frombuffer(weights, dtype=np.uint8, count=needed, offset=offset)
    if etype.bits >= 8:
        value = raw.view(etype.dtype)
    else:
        value = _unpack_bits(raw, etype, count)
    return value.reshape(shape)


def _unpack_bits(raw: np.ndarray, etype: ElementType, count: int) -> np.ndarray:
    if etype.bits == 4:
        # Two elements a byte, the first in the low nibble.
        nibbles = np.stack([raw & 0x0F, raw >> 4], axis=-1).reshape(-1)[:count]
        if etype.name == "i4":
            return ((nibbles.astype(np.int8) ^ 8) - 8).astype(np.int8)
        return nibbles.astype(np.uint8)
    if etype.bits == 2:
        # Four elements a byte, the first in the lowest bits.
        parts = np.stack([(raw >> s) & 0x03 for s in (0, 2, 4, 6)], axis=-1).reshape(-1)[:count]
        return parts.astype(np.uint8)
    if etype.bits == 1:
        # Eight elements a byte, the first in the highest bit.
        return np.unpackbits(raw, bitorder="big")[:count].astype(np.uint8)
    raise IRError(f"cannot unpack {etype.name}")

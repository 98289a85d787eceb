"""How OpenVINO packs sub-byte and string constants in the ``.bin``, and how to unpack them.

Layouts, checked against what OpenVINO's own ``Convert`` computes (see ``tests/ir/test_ir_reader.py``):

- ``u1``: eight values a byte, the first in the highest bit.
- ``u2``: four values a byte, the first in the lowest two bits.
- ``u4``/``i4``/``nf4``/``f4e2m1``: two values a byte, the first in the low nibble.
- ``u3``: eight values in three bytes: bytes 0-1 hold each value's low two bits (four a byte, the
  first in the highest bits), byte 2 each value's third bit (the first in the highest bit).
- ``u6``: four values in three bytes: bytes 0-1 hold the low nibbles (two a byte, the first in the
  high nibble), byte 2 the high two bits (the first in the highest bits).
- ``string``: ``int32`` count ``n``, ``n + 1`` ``int32`` offsets starting at 0, then the UTF-8 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .types import ElementType

__all__ = ["NF4_VALUES", "Packed", "decode_strings", "frozen", "packed_size", "unpack"]

# The 16 values an nf4 code stands for, as OpenVINO's ConvertNF4 spells them.
NF4_VALUES = np.array(
    [
        -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
        -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
        0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
        0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
    ],
    dtype=np.float32,
)  # fmt: skip

# Types packed in groups of ``values`` per ``nbytes`` bytes rather than bit-contiguously.
_GROUPS = {"u3": (8, 3), "u6": (4, 3)}


def packed_size(etype: ElementType, count: int) -> int:
    """Bytes ``count`` values of a fixed-width type take in the ``.bin`` (Python ints: never overflows)."""
    if etype.name in _GROUPS:
        values, nbytes = _GROUPS[etype.name]
        return -(-count // values) * nbytes
    return (count * etype.bits + 7) // 8


def unpack(raw: np.ndarray, etype: ElementType, count: int) -> np.ndarray:
    """Unpack ``count`` sub-byte values from the ``uint8`` array ``raw`` (exactly packed_size bytes).

    Raises:
        ValueError: ``etype`` is not a sub-byte type this module knows.
    """
    name = etype.name
    if name in _GROUPS:
        values, nbytes = _GROUPS[name]
        groups = raw.reshape(-1, nbytes)
        parts = _unpack_u3(groups) if name == "u3" else _unpack_u6(groups)
        return parts.reshape(-1)[:count]
    if etype.bits == 4:
        nibbles = np.stack([raw & 0x0F, raw >> 4], axis=-1).reshape(-1)[:count]
        if name == "i4":
            return ((nibbles.astype(np.int8) ^ 8) - 8).astype(np.int8)
        if name == "nf4":
            return NF4_VALUES[nibbles]
        if name == "f4e2m1":
            assert etype.dtype is not None
            return nibbles.view(etype.dtype)
        return nibbles
    if etype.bits == 2:
        return np.stack([(raw >> s) & 0x03 for s in (0, 2, 4, 6)], axis=-1).reshape(-1)[:count]
    if etype.bits == 1:
        return np.unpackbits(raw, bitorder="big")[:count]
    raise ValueError(f"cannot unpack {name}")


def _unpack_u3(groups: np.ndarray) -> np.ndarray:
    low = np.stack([(groups[:, :2] >> s) & 0x03 for s in (6, 4, 2, 0)], axis=-1).reshape(len(groups), 8)
    high = np.unpackbits(groups[:, 2:3], axis=1, bitorder="big")
    return (high << 2) | low


def _unpack_u6(groups: np.ndarray) -> np.ndarray:
    low = np.stack([groups[:, :2] >> 4, groups[:, :2] & 0x0F], axis=-1).reshape(len(groups), 4)
    high = np.stack([(groups[:, 2] >> s) & 0x03 for s in (6, 4, 2, 0)], axis=-1)
    return (high << 4) | low


def decode_strings(raw: memoryview, count: int) -> np.ndarray:
    """Decode ``count`` strings from their ``.bin`` layout into a 1-D object array.

    Raises:
        ValueError: the count, offsets or UTF-8 bytes are inconsistent with ``raw``.
    """
    if len(raw) < 4:
        raise ValueError(f"{len(raw)} bytes cannot hold a string count")
    header = np.frombuffer(raw, dtype="<i4", count=1)
    if int(header[0]) != count:
        raise ValueError(f"it holds {int(header[0])} strings, the shape says {count}")
    table_end = 4 + 4 * (count + 1)
    if len(raw) < table_end:
        raise ValueError(f"{len(raw)} bytes cannot hold {count + 1} string offsets")
    offsets = np.frombuffer(raw, dtype="<i4", count=count + 1, offset=4).astype(np.int64)
    chars = raw[table_end:]
    if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != len(chars):
        raise ValueError(f"string offsets {offsets.tolist()[:8]} do not fit {len(chars)} bytes of text")
    out = np.empty(count, dtype=object)
    try:
        for i in range(count):
            out[i] = bytes(chars[offsets[i] : offsets[i + 1]]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"string {i} is not UTF-8 ({exc.reason})") from None
    return out


def frozen(value: np.ndarray) -> np.ndarray:
    """``value``, made read-only (constants are shared: nobody may write into them)."""
    value.flags.writeable = False
    return value


@dataclass(frozen=True)
class Packed:
    """A sub-byte constant as stored: ``raw`` (read-only ``uint8``, a view into the ``.bin``) holds
    ``count`` values of ``etype`` packed as this module describes."""

    etype: ElementType
    shape: tuple[int, ...]
    raw: np.ndarray

    def unpack(self) -> np.ndarray:
        return frozen(unpack(self.raw, self.etype, math.prod(self.shape)).reshape(self.shape))

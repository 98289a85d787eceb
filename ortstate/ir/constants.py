"""Decode ``Const`` layers from the ``.bin``: bounds and size checks before any allocation.

Constants of byte-sized types are read-only views into the memory-mapped ``.bin`` (no copy);
boolean-with-junk and string constants are decoded into new arrays. Sub-byte constants stay packed
until a value is asked for (:class:`ConstantTable`): compressed weights are read packed, and
unpacking every int4 weight up front would double the memory of an int4 model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np

from ..errors import IRError
from .graph import Layer
from .packing import Packed, decode_strings, frozen, packed_size
from .shapes import parse_static_shape
from .types import element_type

__all__ = ["ConstantTable", "decode_constant"]


class ConstantTable(Mapping[int, np.ndarray]):
    """Const layer id -> value; sub-byte values are unpacked on each access (callers keep what they need)."""

    def __init__(self, values: dict[int, np.ndarray | Packed]) -> None:
        self._values = values

    def __getitem__(self, key: int) -> np.ndarray:
        value = self._values[key]
        return value.unpack() if isinstance(value, Packed) else value

    def __iter__(self) -> Iterator[int]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def packed(self, key: int) -> Packed | None:
        """The stored form of a sub-byte constant; None for other types."""
        value = self._values[key]
        return value if isinstance(value, Packed) else None


def decode_constant(
    layer: Layer, weights: bytes | memoryview, where: str, bin_name: str, file_size: int | None = None
) -> np.ndarray | Packed:
    """The value of a Const layer as a read-only numpy array, or :class:`Packed` for sub-byte types.

    Args:
        layer: the Const; its ``element_type`` and ``shape`` were validated by the layer parser.
        weights: the ``.bin``, at least up to the end of this constant's declared data.
        file_size: the ``.bin``'s size, when ``weights`` is only its start (for messages and checks).
        where: how errors name the layer (``<xml>: layer 'NAME' (id N)``).
        bin_name: the ``.bin`` path, for errors.

    Raises:
        IRError: a missing/non-integer/negative offset or size, data outside the ``.bin``, a shape
            needing more bytes than the ``.bin`` holds, a size that does not match the shape, or
            data that cannot be decoded (malformed strings, a type without a numpy equivalent).
    """
    etype = element_type(layer.attrs["element_type"])
    file_size = len(weights) if file_size is None else file_size
    shape = parse_static_shape(layer.attrs["shape"])
    offset = _int(layer, "offset", where)
    size = _int(layer, "size", where)
    if offset + size > len(weights):
        raise IRError(
            f"{where}: data at offset {offset} size {size} is outside the weights file {bin_name} "
            f"({len(weights)} bytes)"
        )
    count = math.prod(shape)  # Python ints: an absurd shape cannot overflow into a small number
    if etype.name == "string":
        try:
            strings = decode_strings(memoryview(weights)[offset : offset + size], count)
        except ValueError as exc:
            raise IRError(f"{where}: cannot decode string data: {exc}") from None
        return frozen(strings.reshape(shape))
    if etype.dtype is None:
        raise IRError(f"{where}: constants of element type {etype.name} cannot be decoded")
    needed = packed_size(etype, count)
    if needed > file_size:
        raise IRError(
            f"{where}: shape {list(shape)} of {etype.name} needs {needed} bytes, "
            f"more than the weights file {bin_name} holds ({file_size} bytes)"
        )
    # An empty constant is written with size 0 or 1; anything else must match the shape exactly.
    if size != needed and not (count == 0 and size <= 1):
        raise IRError(f"{where}: size {size} does not match shape {list(shape)} of {etype.name} ({needed} bytes)")
    if count == 0:
        try:
            return frozen(np.empty(shape, dtype=etype.dtype))
        except ValueError:  # numpy refuses shapes whose non-zero dims overflow, even when empty
            raise IRError(f"{where}: empty shape {list(shape)} is too large for numpy") from None
    raw = np.frombuffer(weights, dtype=np.uint8, count=needed, offset=offset)
    if etype.bits < 8:
        return Packed(etype, tuple(shape), raw)
    if etype.dtype == np.bool_ and raw.max() > 1:
        return frozen((raw != 0).reshape(shape))  # any non-zero byte is true, as in OpenVINO
    return raw.view(etype.dtype).reshape(shape)


def _int(layer: Layer, key: str, where: str) -> int:
    raw = layer.attrs.get(key)
    if raw is None:
        raise IRError(f"{where}: missing attribute '{key}'")
    try:
        value = int(raw.strip())
    except ValueError:
        raise IRError(f"{where}: attribute '{key}' is not an integer: {raw!r}") from None
    if value < 0:
        raise IRError(f"{where}: negative {key} {value}")
    return value

"""What a recognised compressed weight is: a quantized weight, a large f16/bf16 one, and the
marker its consumers see instead of an ONNX value."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...ir import Layer

__all__ = ["CompressedInput", "FloatWeight", "QuantizedWeight"]


@dataclass(frozen=True)
class QuantizedWeight:
    """A block-quantized 2-D weight in ``[rows, k]`` orientation: ``W[n, k] = (codes[n, k] -
    zero_point[n, g]) * scale[n, g]`` with ``g = k // group``, rows ``n`` the output channels
    (MatMul) or table rows (Gather), ``k`` the reduction (or embedding) axis.

    ``packed`` holds the codes as stored (``uint8``): for 4 bits two a byte along ``k`` (low nibble
    first) when every row starts on a byte, else None and ``codes()`` unpacks. ``signed`` codes
    (i4/i8) are offset by ``2**(bits-1)`` into the unsigned form ONNX Runtime takes, and so are
    their zero points (``zero_point`` is already in that form).
    """

    layer: Layer  # the chain's last layer: what the consumer reads
    bits: int
    signed: bool
    rows: int
    k: int
    group: int  # values along k sharing one scale (k itself: per channel)
    block: int  # ONNX Runtime's block along k (a power of two >= 16 inside a group; see recognise)
    scale: np.ndarray  # [rows, groups] float32
    zero_point: np.ndarray  # [rows, groups] uint8, unsigned form
    source: str  # e.g. "u4 g128 asym"
    stored_bytes: int
    stored_codes: Callable[[], np.ndarray]  # [rows, k] as stored (uint8/int8), unpacked on demand
    packed: np.ndarray | None = None

    @property
    def groups(self) -> int:
        return self.scale.shape[1]

    @property
    def blocks(self) -> int:
        """ONNX Runtime's blocks along ``k`` (the last one partial when ``block`` does not divide it)."""
        return -(-self.k // self.block)

    def codes(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows ``start:stop`` of the ``[rows, k]`` uint8 codes in the unsigned form (a copy only
        where a transform is needed)."""
        codes = self.stored_codes()[start:stop]
        if self.signed:
            return (codes.astype(np.int16) + (1 << (self.bits - 1))).astype(np.uint8)
        return codes.astype(np.uint8, copy=False)

    def packed_unsigned(self) -> np.ndarray | None:
        """The stored 4-bit bytes ``[rows, k / 2]`` in the unsigned form, or None (unpack instead)."""
        if self.packed is None:
            return None
        return self.packed ^ np.uint8(0x88) if self.signed else self.packed


@dataclass(frozen=True)
class FloatWeight:
    """A large ``Convert(Const f16|bf16 -> f32)``: kept in its stored type, widened by a Cast."""

    layer: Layer
    value: np.ndarray  # the stored constant (float16 or bfloat16), read-only view
    source: str


class CompressedInput(str):
    """What a layer reading a quantized weight finds in ``Node.inputs``: the weight has no ONNX
    value (its consumer reads it through ``Node.weight``). The text names the layer, so a node
    that read it anyway would fail at load naming the weight, never read some other value."""

    __slots__ = ()

    def __new__(cls, layer: Layer) -> CompressedInput:
        return super().__new__(cls, f"ortstate.compressed:{layer.name}")

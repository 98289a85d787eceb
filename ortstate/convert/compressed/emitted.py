"""What one graph's conversion has written for its compressed weights, so that each is written
once however many layers read it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from ...ir import Layer
from .nbits import NBitsInputs
from .weights import FloatWeight, QuantizedWeight

__all__ = ["EmittedWeights", "FloatValues"]

_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass(frozen=True)
class FloatValues:
    """An f16/bf16 weight's initializer (``stored``) and its Cast to f32 (``widened``)."""

    stored: str
    widened: str


@dataclass
class EmittedWeights:
    """Per weight (by its layer id) and use, the values written for it; per MatMul (by layer id)
    in a split group, its output, written with its group's first MatMul (see ``plan``).

    Each ``*_inputs``/``float_values`` call returns what was written before for that weight and
    use, or calls ``write`` once and keeps its result.
    """

    matmul: dict[tuple[int, bool], NBitsInputs] = field(default_factory=dict)  # (weight, native 8-bit)
    gather: dict[int, NBitsInputs] = field(default_factory=dict)
    floats: dict[tuple[int, bool], FloatValues] = field(default_factory=dict)  # (weight, transposed)
    split_outputs: dict[int, str] = field(default_factory=dict)

    def matmul_inputs(self, w: QuantizedWeight, native8: bool, write: Callable[[], NBitsInputs]) -> NBitsInputs:
        """``w``'s ``MatMulNBits`` inputs (``native8``: an 8-bit weight as bits=8, not nibbles)."""
        return _once(self.matmul, (w.layer.id, native8), write)

    def gather_inputs(self, w: QuantizedWeight, write: Callable[[], NBitsInputs]) -> NBitsInputs:
        """``w``'s ``GatherBlockQuantized`` inputs."""
        return _once(self.gather, w.layer.id, write)

    def float_values(self, w: FloatWeight, transposed: bool, write: Callable[[], FloatValues]) -> FloatValues:
        """``w``'s initializer (``transposed``: written as its transpose) and its Cast."""
        return _once(self.floats, (w.layer.id, transposed), write)

    def split_output(self, matmul: Layer) -> str | None:
        """The output of ``matmul`` if its split group is written, else None."""
        return self.split_outputs.get(matmul.id)

    def add_split_outputs(self, outputs: Iterable[tuple[Layer, str]]) -> None:
        """Record each MatMul's output of a split group just written."""
        for matmul, out in outputs:
            self.split_outputs[matmul.id] = out


def _once(table: dict[_K, _V], key: _K, write: Callable[[], _V]) -> _V:
    if key not in table:
        table[key] = write()
    return table[key]

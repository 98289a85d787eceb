"""What is known before a run about one ONNX value: its shape, whose dims are numbers or symbols, and,
for a small integer tensor (a shape, indices, lengths), its elements.

A symbol :class:`Sym` is the size of one axis of one graph input: the same symbol twice is the same
number in every run, whatever it is. :mod:`.symbolic` works out what is known of every value of a
graph from what is known here of its inputs and initializers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

__all__ = [
    "INTS",
    "MAX_ELEMENTS",
    "UNKNOWN",
    "Dim",
    "Known",
    "Sym",
    "broadcast",
    "element_count",
    "of_input",
    "of_tensor",
    "static_dims",
]

MAX_ELEMENTS = 64  # integer tensors whose elements are tracked (shapes, indices, lengths)
INTS = frozenset(
    {TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL}
)


@dataclass(frozen=True)
class Sym:
    """The size of axis ``axis`` of graph input ``source``."""

    source: str
    axis: int


Dim = int | Sym | None  # None: not known


@dataclass(frozen=True)
class Known:
    """What is known of one value: ``shape`` (None: not even the rank), ``elem`` (its ONNX element
    type, or None), ``values`` (its elements, row-major, when each is known) and ``fill`` (the one
    value every element has, when known)."""

    shape: tuple[Dim, ...] | None = None
    elem: int | None = None
    values: tuple[Dim, ...] | None = None
    fill: Dim = None

    @property
    def static(self) -> bool:
        """Every element a number: the value can be an initializer."""
        return self.values is not None and all(isinstance(v, int) for v in self.values) and static_dims(self.shape)

    def array(self) -> np.ndarray:
        """The value of a :attr:`static` one."""
        dtype = onnx.helper.tensor_dtype_to_np_dtype(self.elem or TensorProto.INT64)
        return np.array(self.values, dtype=dtype).reshape([int(d) for d in self.shape or ()])


UNKNOWN = Known()


def static_dims(dims: tuple[Dim, ...] | None) -> bool:
    return dims is not None and all(isinstance(d, int) for d in dims)


def element_count(shape: tuple[Dim, ...] | None) -> int | None:
    return int(np.prod(shape, dtype=np.int64)) if static_dims(shape) else None


def of_tensor(tensor: onnx.TensorProto) -> Known:
    """An initializer's (or a Constant's) shape, type and, when small and inline, elements."""
    shape = tuple(int(d) for d in tensor.dims)
    n = element_count(shape)
    if tensor.data_type not in INTS or tensor.data_location == TensorProto.EXTERNAL or n is None or n > MAX_ELEMENTS:
        return Known(shape, tensor.data_type)
    values = tuple(int(v) for v in numpy_helper.to_array(tensor).reshape(-1))
    fill = values[0] if values and all(v == values[0] for v in values) else None
    return Known(shape, tensor.data_type, values, fill)


def of_input(value: onnx.ValueInfoProto) -> Known:
    """A graph input: its declared dims, a symbol where one is not a number."""
    if not value.type.HasField("tensor_type"):
        return UNKNOWN
    tensor = value.type.tensor_type
    shape = None
    if tensor.HasField("shape"):
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else Sym(value.name, i) for i, d in enumerate(tensor.shape.dim)
        )
    return Known(shape, tensor.elem_type or None)


def _same_dim(a: Dim, b: Dim) -> bool:
    return a is not None and a == b


def broadcast(a: tuple[Dim, ...] | None, b: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    """Numpy broadcasting of two shapes; a dim not known for sure is None."""
    if a is None or b is None:
        return None
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out: list[Dim] = []
    for x, y in zip(a, b):
        out.append(y if x == 1 else x if y == 1 or _same_dim(x, y) else None)
    return tuple(out)

"""Initializers out of the protobuf: each becomes an external-data reference to no file, its value
handed back for the caller to give to ONNX Runtime (``SessionOptions.add_external_initializers``).

Which ones: the converter's in-memory stubs (an IR converted in memory: a view into the IR's
memory-mapped ``.bin``, or a function making an array from it; see ``ortstate.convert.external``),
and, when a graph's inline initializers pass :data:`OFFLOAD_ABOVE` (protobuf cannot serialise
2 GB), those of at least :data:`MIN_BYTES`. Why this saves memory is in :mod:`ortstate.runtime.large`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..protosize import tensor_bytes

__all__ = ["MIN_BYTES", "NOWHERE", "OFFLOAD_ABOVE", "Offloaded", "offload_initializers", "offloads_any"]

OFFLOAD_ABOVE = 1 << 30  # inline initializer bytes of the main graph; protobuf's limit is 2 GB
MIN_BYTES = 1 << 20  # smaller inline initializers stay in the model
NOWHERE = "ortstate-offloaded-initializer"  # an external-data location never read: the value is handed over
# ONNX element types numpy has no dtype for: handed over as raw storage of the same width.
_STORAGE = {onnx.TensorProto.BFLOAT16: np.uint16}

Value = np.ndarray | Callable[[], np.ndarray]


class Offloaded(NamedTuple):
    """One initializer taken out of the model: its name, value and ONNX element type."""

    name: str
    value: np.ndarray
    data_type: int


def offloads_any(model: onnx.ModelProto, arrays: Mapping[str, Value] | None = None) -> bool:
    """Whether :func:`offload_initializers` would change ``model``."""
    graph = model.graph
    return any(t.name in (arrays or {}) for t in graph.initializer) or bool(_inline_large(graph))


def offload_initializers(model: onnx.ModelProto, arrays: Mapping[str, Value] | None = None) -> list[Offloaded]:
    """Take the initializers described above out of ``model`` (in place), in graph order.

    Args:
        arrays: the values of the converter's in-memory stubs, by initializer name (a callable
            makes its array when called).
    """
    arrays = arrays or {}
    graph = model.graph
    taken = {i for i, t in enumerate(graph.initializer) if t.name in arrays} | set(_inline_large(graph))
    out: list[Offloaded] = []
    for index in sorted(taken):
        tensor = graph.initializer[index]
        if tensor.name in arrays:
            array = _stub_value(tensor, arrays[tensor.name])
        else:
            array = np.ascontiguousarray(numpy_helper.to_array(tensor))
        out.append(Offloaded(tensor.name, array, tensor.data_type))
        _point_nowhere(tensor, array.nbytes)
    return out


def _inline_large(graph: onnx.GraphProto) -> list[int]:
    sizes = [tensor_bytes(t) for t in graph.initializer]
    return [i for i, size in enumerate(sizes) if size >= MIN_BYTES] if sum(sizes) > OFFLOAD_ABOVE else []


def _stub_value(tensor: onnx.TensorProto, value: Value) -> np.ndarray:
    """A converter stub's value (made now if lazy), as the storage ONNX Runtime reads."""
    dtype = np.dtype(_STORAGE.get(tensor.data_type) or helper.tensor_dtype_to_np_dtype(tensor.data_type))
    array = np.ascontiguousarray(value() if callable(value) else value)
    return (array.view(dtype) if array.dtype != dtype else array).reshape(tuple(tensor.dims))


def _point_nowhere(tensor: onnx.TensorProto, nbytes: int) -> None:
    name, data_type, dims = tensor.name, tensor.data_type, list(tensor.dims)
    tensor.Clear()  # frees the data held in the model
    tensor.name, tensor.data_type = name, data_type
    tensor.dims.extend(dims)
    for key, value in (("location", NOWHERE), ("offset", "0"), ("length", str(nbytes))):
        tensor.external_data.add(key=key, value=value)
    tensor.data_location = onnx.TensorProto.EXTERNAL

"""Large initializers outside the protobuf: stubs while converting, a data file when saved.

A compressed 0.5B-parameter IR holds ~0.4 GB of weights. Copying each into a ``TensorProto`` would
hold them twice (the memory-mapped ``.bin`` and the protobuf), and protobuf can't hold more than
2 GB at all. So the converter keeps every initializer of :data:`LARGE_BYTES` or more as a numpy
array, or a function making one (a view into the ``.bin`` where the bytes go to ONNX as they are),
behind a stub: a ``TensorProto`` with its name, type and dims, whose external data is
:data:`MEMORY`. Saving streams each array into ``MODEL.onnx.data`` (page-aligned offsets, so
ONNX Runtime and ortstate can map tensors in place) and points the stub there; the runtime hands
in-memory arrays to ONNX Runtime as ``OrtValue``s; :func:`inline` copies them into the protobuf.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import helper

from ..output_files import OutputFiles

__all__ = ["ALIGN", "EXTERNAL_ABOVE", "LARGE_BYTES", "MEMORY", "Lazy", "inline", "save_model", "stub"]

LARGE_BYTES = 4096
MEMORY = "ortstate:memory"  # a stub's location while the array is held in memory
EXTERNAL_ABOVE = 64 << 20  # saved with a data file beside it above this many bytes of initializers
ALIGN = 4096


class Lazy:
    """An array made when it is written or loaded (a transform of the ``.bin``'s bytes), so a
    converted model never holds all its transformed weights at once."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, make: Callable[[], np.ndarray]) -> None:
        self.shape, self.dtype, self._make = tuple(shape), np.dtype(dtype), make
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __call__(self) -> np.ndarray:
        value = np.ascontiguousarray(self._make(), dtype=self.dtype)
        if value.shape != self.shape:
            raise AssertionError(f"lazy initializer made {value.shape}, declared {self.shape}")
        return value


Array = np.ndarray | Lazy


def materialize(value: Array) -> np.ndarray:
    return value() if isinstance(value, Lazy) else np.ascontiguousarray(value)


def stub(name: str, value: Array) -> onnx.TensorProto:
    tensor = onnx.TensorProto()
    tensor.name = name
    tensor.data_type = helper.np_dtype_to_tensor_dtype(value.dtype)
    tensor.dims.extend(value.shape)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    _set_location(tensor, MEMORY, 0, value.nbytes)
    return tensor


def is_stub(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL and _location(tensor) == MEMORY


def _location(tensor: onnx.TensorProto) -> str | None:
    return next((e.value for e in tensor.external_data if e.key == "location"), None)


def _set_location(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        tensor.external_data.add(key=key, value=value)


def inline(graph: onnx.GraphProto, arrays: Mapping[str, Array]) -> None:
    """Copy every stub's array into its ``TensorProto`` (field by field: no 2 GB message copies)."""
    for tensor in graph.initializer:
        if is_stub(tensor):
            raw = materialize(arrays[tensor.name]).tobytes()
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            tensor.raw_data = raw


def save_model(
    model: onnx.ModelProto,
    arrays: Mapping[str, Array],
    path: str | os.PathLike[str],
    files: OutputFiles | None = None,
) -> None:
    """Write ``model``; with more than :data:`EXTERNAL_ABOVE` bytes of stubs, their data goes to
    ``PATH.data`` (streamed one array at a time) and the stubs point there, else it is inlined (and
    an earlier model's ``PATH.data`` is removed).

    Both files are written as :mod:`ortstate.output_files` writes (temporary files renamed over
    the targets once both are whole); into ``files`` when given, for the caller to commit with
    files of its own.

    Raises:
        OutputFileError: a file cannot be written; the files there are left as they were.
    """
    if files is None:
        with OutputFiles() as own:
            _save(model, arrays, Path(path), own)
    else:
        _save(model, arrays, Path(path), files)


def _save(model: onnx.ModelProto, arrays: Mapping[str, Array], path: Path, files: OutputFiles) -> None:
    stubs = [t for t in model.graph.initializer if is_stub(t)]
    total = sum(arrays[t.name].nbytes for t in stubs)
    data = path.with_name(path.name + ".data")
    if total <= EXTERNAL_ABOVE:
        inline(model.graph, arrays)
        files.write(path, lambda f: f.write(model.SerializeToString()))
        files.remove(data)  # an earlier, larger model's data: no longer ours
        return

    def write_data(f: BinaryIO) -> None:
        for tensor in stubs:
            offset = -f.tell() % ALIGN
            f.write(b"\0" * offset)
            start = f.tell()
            f.write(memoryview(materialize(arrays[tensor.name])).cast("B"))
            _set_location(tensor, data.name, start, f.tell() - start)

    files.write(data, write_data)
    files.write(path, lambda f: f.write(model.SerializeToString()))

"""How large initializers reach ONNX Runtime without the protobuf holding them.

Measured with ONNX Runtime 1.31 (24 f32 weights of 896x4864, 400 MB): inlined in the serialised
model, a session holds ~2.9x the weights after load and peaks at ~5x. So ``StatefulSession``:

- lets ONNX Runtime read a model file's external data (``MODEL.onnx.data``) itself, relative to
  the file's folder (``session.model_external_initializers_file_folder_path``): it maps the file
  and holds one copy after prepacking (peak 1.04x; f16 weights behind a Cast: one f32 copy, peak
  1.35x);
- hands over a converter stub's value (an IR converted in memory: a view into the IR's
  memory-mapped ``.bin``, or an array made from it, see ``ortstate.convert.external``) and, when
  the inline initializers pass :data:`OFFLOAD_ABOVE` (protobuf can't serialise 2 GB), those of at
  least :data:`MIN_BYTES`, with ``add_external_initializers``, which copies them into the session
  (its documented contract): each becomes an external-data reference to no file.

Once the session exists nothing handed over is needed, and :func:`release_mapped_pages` drops the
pages of the IR's ``.bin`` a conversion read from the process.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from ..errors import OrtStateError
from ..protosize import tensor_bytes

__all__ = ["MIN_BYTES", "OFFLOAD_ABOVE", "Offloaded", "offload_large_initializers", "release_mapped_pages"]

OFFLOAD_ABOVE = 1 << 30  # inline initializer bytes of the main graph; protobuf's limit is 2 GB
MIN_BYTES = 1 << 20  # smaller inline initializers stay in the model
_NOWHERE = "ortstate-offloaded-initializer"  # never read: ONNX Runtime is handed the values
# ONNX element types numpy has no dtype for: handed over as raw storage of the same width.
_STORAGE = {onnx.TensorProto.BFLOAT16: np.uint16}


class Offloaded(list):
    """What must outlive the session's creation (arrays, OrtValues, mapped files)."""


def offload_large_initializers(
    model: onnx.ModelProto,
    options: ort.SessionOptions,
    in_place: bool = False,
    arrays: Mapping[str, np.ndarray | Callable[[], np.ndarray]] | None = None,
    base_dir: Path | None = None,
) -> tuple[onnx.ModelProto, Offloaded]:
    """The model (changed in place if ``in_place``, else a copy when anything changes) with the
    initializers described above handed to ``options``, and what must outlive the session's
    creation.

    Args:
        arrays: values of the converter's in-memory stubs, by initializer name.
        base_dir: where a model file's external data lives (its directory).

    Raises:
        OrtStateError: the model refers to external data but was not opened from its file.
    """
    arrays = arrays or {}
    graph = model.graph
    external = [i for i, t in enumerate(graph.initializer) if t.name in arrays]
    elsewhere = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL and t.name not in arrays]
    if elsewhere and base_dir is None:
        location = next((e.value for e in elsewhere[0].external_data if e.key == "location"), "?")
        raise OrtStateError(
            f"initializer '{elsewhere[0].name}' is external data in '{location}': open the model from its file "
            "(a path), or load its data into the ModelProto first"
        )
    if elsewhere:
        # the model file's own external data: ONNX Runtime maps it, relative to the file's folder
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base_dir))
    sizes = [tensor_bytes(t) for t in graph.initializer]
    inline = [i for i, size in enumerate(sizes) if size >= MIN_BYTES] if sum(sizes) > OFFLOAD_ABOVE else []
    if not external and not inline:
        return model, Offloaded()
    out = model
    if not in_place:
        out = onnx.ModelProto()
        out.CopyFrom(model)
    handed: dict[str, tuple[np.ndarray, int]] = {}
    for index in sorted(external + inline):
        tensor = out.graph.initializer[index]
        if index in external:
            array = _in_memory_value(tensor, arrays[tensor.name])
        else:
            array = np.ascontiguousarray(numpy_helper.to_array(tensor))
        handed[tensor.name] = (array, tensor.data_type)
    keep = Offloaded()
    names: list[str] = []
    values: list[ort.OrtValue] = []
    for tensor in out.graph.initializer:
        if tensor.name in handed:
            array, data_type = handed[tensor.name]
            _point_nowhere(tensor, array.nbytes)
            names.append(tensor.name)
            values.append(ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, data_type))
            keep.append(array)
    options.add_external_initializers(names, values)
    keep.extend(values)
    return out, keep


def release_mapped_pages(keep: list[Any]) -> None:
    """Drop the pages of every memory-mapped file behind ``keep`` (the IR's ``.bin`` an in-memory
    conversion viewed) from this process: ONNX Runtime copied what it needs. Safe: the mappings
    are read-only, and pages stay in the page cache."""
    maps: dict[int, mmap.mmap] = {}
    for item in keep:
        if isinstance(item, np.ndarray) and (owner := _owner(item)) is not None:
            maps[id(owner)] = owner
    for mapping in maps.values():
        if hasattr(mmap, "MADV_DONTNEED") and not mapping.closed:
            mapping.madvise(mmap.MADV_DONTNEED)


def _owner(array: np.ndarray) -> mmap.mmap | None:
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    owner = base.obj if isinstance(base, memoryview) else base
    return owner if isinstance(owner, mmap.mmap) and not owner.closed else None


def _in_memory_value(tensor: onnx.TensorProto, value: Any) -> np.ndarray:
    """A converter stub's value (made now if lazy), as the storage ONNX Runtime reads."""
    dtype = np.dtype(_STORAGE.get(tensor.data_type) or helper.tensor_dtype_to_np_dtype(tensor.data_type))
    array = np.ascontiguousarray(value() if callable(value) else value)
    return (array.view(dtype) if array.dtype != dtype else array).reshape(tuple(tensor.dims))


def _point_nowhere(tensor: onnx.TensorProto, nbytes: int) -> None:
    name, data_type, dims = tensor.name, tensor.data_type, list(tensor.dims)
    tensor.Clear()  # frees the data held in the model
    tensor.name, tensor.data_type = name, data_type
    tensor.dims.extend(dims)
    for key, value in (("location", _NOWHERE), ("offset", "0"), ("length", str(nbytes))):
        tensor.external_data.add(key=key, value=value)
    tensor.data_location = onnx.TensorProto.EXTERNAL

"""Large initializers reach ONNX Runtime as OrtValues over memory ortstate maps or holds, not as protobuf.

Measured with ONNX Runtime 1.31 (24 f32 weights of 896x4864, 400 MB): inlined in the serialised
model, a session holds ~2.9x the weights after load (the protobuf's copy, its own, the prepacked
one) and peaks at ~5x; handed over with ``SessionOptions.add_external_initializers``, it adds only
its prepacked copy. So ``StatefulSession`` hands over every initializer that is

- external data of a model file (``MODEL.onnx.data``): memory-mapped, not read;
- a converter stub (an IR converted in memory: a view into the IR's memory-mapped ``.bin``, or an
  array made from it), see ``ortstate.convert.external``;
- inline, when the model's inline initializers pass :data:`OFFLOAD_ABOVE` (protobuf can't
  serialise 2 GB): those of at least :data:`MIN_BYTES`.

Each becomes an external-data reference to no file, which the OrtValue fills. Once the session
exists, :func:`release_mapped_pages` drops the mapped files' pages from the process: ONNX Runtime
packed most weights into its own buffers, and what it still reads maps back in on demand.

``add_external_initializers`` copies the values into the session (its documented contract), so
nothing needs to outlive the session's creation. A model file's own external data is better read
by ONNX Runtime itself (``session.model_external_initializers_file_folder_path``): measured on 24
f32 weights (400 MB), it then holds one copy after prepacking (peak 1.04x), and for f16 weights
behind a Cast one f32 copy (peak 1.35x), where handing them over holds two.
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
    initializers described above handed to ``options``, and what must outlive the session.

    Args:
        arrays: values of the converter's in-memory stubs, by initializer name.
        base_dir: where a model file's external data lives (its directory).

    Raises:
        OrtStateError: external data that is missing, or does not hold what the model says.
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
    files = _Files(base_dir)
    handed: dict[str, tuple[np.ndarray, int]] = {}
    for index in sorted(external + inline):
        tensor = out.graph.initializer[index]
        if index in external:
            array = _external_value(tensor, arrays, files)
        else:
            array = np.ascontiguousarray(numpy_helper.to_array(tensor))
        handed[tensor.name] = (array, tensor.data_type)
    keep = Offloaded([files])
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
        if isinstance(item, _Files):
            maps.update((id(m), m) for m in item.maps.values())
        elif isinstance(item, np.ndarray) and (owner := _owner(item)) is not None:
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


class _Files:
    """The model's external data files, each mapped once (read-only)."""

    def __init__(self, base_dir: Path | None) -> None:
        self.base_dir = base_dir
        self.maps: dict[str, mmap.mmap] = {}

    def map(self, location: str, tensor_name: str) -> mmap.mmap:
        if location not in self.maps:
            if self.base_dir is None:
                raise OrtStateError(
                    f"initializer '{tensor_name}' is external data in '{location}': open the model from its "
                    "file (a path), or load its data into the ModelProto first"
                )
            path = self.base_dir / location
            if Path(location).is_absolute() or ".." in Path(location).parts:
                raise OrtStateError(
                    f"initializer '{tensor_name}': external data location '{location}' must be a file beside the model"
                )
            try:
                with path.open("rb") as f:
                    self.maps[location] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                raise OrtStateError(f"initializer '{tensor_name}': cannot map external data {path}: {exc}") from None
        return self.maps[location]


def _external_value(tensor: onnx.TensorProto, arrays: Mapping[str, Any], files: _Files) -> np.ndarray:
    info = {e.key: e.value for e in tensor.external_data}
    dtype = np.dtype(_STORAGE.get(tensor.data_type) or helper.tensor_dtype_to_np_dtype(tensor.data_type))
    shape = tuple(tensor.dims)
    if tensor.name in arrays:
        value = arrays[tensor.name]
        array = np.ascontiguousarray(value() if callable(value) else value)
        return array.view(dtype).reshape(shape) if array.dtype != dtype else array.reshape(shape)
    mapping = files.map(info.get("location", ""), tensor.name)
    try:
        offset = int(info.get("offset", "0"))
        count = int(np.prod(shape, dtype=np.int64))
        length = int(info.get("length", str(count * dtype.itemsize)))
    except ValueError:
        raise OrtStateError(f"initializer '{tensor.name}': malformed external data {info}") from None
    if length != count * dtype.itemsize or offset < 0 or offset + length > len(mapping):
        raise OrtStateError(
            f"initializer '{tensor.name}': external data in '{info.get('location')}' at offset {offset} "
            f"length {length} does not hold {list(shape)} {dtype} (file of {len(mapping)} bytes)"
        )
    return np.frombuffer(mapping, dtype=dtype, count=count, offset=offset).reshape(shape)


def _point_nowhere(tensor: onnx.TensorProto, nbytes: int) -> None:
    name, data_type, dims = tensor.name, tensor.data_type, list(tensor.dims)
    tensor.Clear()  # frees the data held in the model
    tensor.name, tensor.data_type = name, data_type
    tensor.dims.extend(dims)
    for key, value in (("location", _NOWHERE), ("offset", "0"), ("length", str(nbytes))):
        tensor.external_data.add(key=key, value=value)
    tensor.data_location = onnx.TensorProto.EXTERNAL

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

f16/bf16 weights reach f32 through a ``Cast`` (ONNX Runtime 1.31's CPU provider has no MatMul over
f16 weights and f32 activations). Left to ONNX Runtime, the Cast folds into a copy it owns, which
MatMul prepacks into another: 3.1x OpenVINO's peak memory on the real-size fp16 model. So such a
Cast is done here, one weight at a time (its f16 pages released as it goes), into an array handed
over like the others; :func:`offload_large_initializers` then says so, and a session with default
options turns prepacking off (one f32 copy: decode measured as fast, a 32-token prefill's
MatMuls ~25% slower) unless the model also has ``MatMulNBits``, which needs it.
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
    """What must outlive the session (arrays, OrtValues, mapped files); ``widened``: f16/bf16
    weights were widened here (see the module docstring)."""

    widened = False


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
    external = [i for i, t in enumerate(graph.initializer) if t.data_location == onnx.TensorProto.EXTERNAL]
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
    widened = _widen_casts(out.graph, handed)
    keep = Offloaded([files])
    keep.widened = bool(widened)
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


def _widen_casts(graph: onnx.GraphProto, handed: dict[str, tuple[np.ndarray, int]]) -> list[str]:
    """Do each ``Cast(to=FLOAT)`` of a handed-over f16/bf16 initializer read only by such Casts:
    the Cast's output becomes a handed-over f32 initializer (see the module docstring)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in set(node.input) | _subgraph_reads(node):
            readers.setdefault(name, []).append(node)
    widened: list[str] = []
    sources: set[str] = set()
    for name, (array, data_type) in list(handed.items()):
        if data_type not in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
            continue
        casts = readers.get(name, [])
        if not casts or not all(_is_cast_to_float(n) and list(n.input) == [name] for n in casts):
            continue
        if data_type == onnx.TensorProto.BFLOAT16:
            wide = (array.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            wide = array.astype(np.float32)
        _release_range(array)
        del handed[name]
        sources.add(name)
        for cast in casts:
            handed[cast.output[0]] = (wide, onnx.TensorProto.FLOAT)
            tensor = graph.initializer.add()
            tensor.name, tensor.data_type = cast.output[0], onnx.TensorProto.FLOAT
            tensor.dims.extend(wide.shape)
            widened.append(cast.output[0])
    if widened:
        done = set(widened)
        kept = [n for n in graph.node if not (_is_cast_to_float(n) and n.output[0] in done)]
        del graph.node[:]
        graph.node.extend(kept)
        unused = [
            i for i, t in enumerate(graph.initializer) if t.name not in handed and t.name in _sources(done, readers)
        ]
        for index in reversed(unused):
            del graph.initializer[index]
    return widened


def _sources(outputs: set[str], readers: dict[str, list[onnx.NodeProto]]) -> set[str]:
    return {
        name for name, nodes in readers.items() if nodes and all(n.output and n.output[0] in outputs for n in nodes)
    }


def _is_cast_to_float(node: onnx.NodeProto) -> bool:
    return (
        node.op_type == "Cast"
        and node.domain in ("", "ai.onnx")
        and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in node.attribute)
    )


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    names: set[str] = set()
    for attr in node.attribute:
        for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            for inner in g.node:
                names.update(inner.input)
                names.update(_subgraph_reads(inner))
    return names


def _owner(array: np.ndarray) -> mmap.mmap | None:
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    owner = base.obj if isinstance(base, memoryview) else base
    return owner if isinstance(owner, mmap.mmap) and not owner.closed else None


def _release_range(array: np.ndarray) -> None:
    """Drop the pages of ``array`` from this process if it is a view into a mapped file."""
    owner = _owner(array)
    if owner is None or not hasattr(mmap, "MADV_DONTNEED") or array.nbytes == 0:
        return
    start = array.ctypes.data - np.frombuffer(owner, np.uint8, count=1).ctypes.data
    first = start + -start % mmap.PAGESIZE  # whole pages only: a neighbour may share the edge pages
    last = start + array.nbytes
    last -= last % mmap.PAGESIZE
    if last > first and first >= 0:
        owner.madvise(mmap.MADV_DONTNEED, first, last - first)


def release_mapped_pages(keep: list[Any]) -> None:
    """Drop the pages of every memory-mapped file behind ``keep`` from this process (they stay in
    the page cache; ONNX Runtime faults back in what it reads). Safe: the mappings are read-only."""
    maps: dict[int, mmap.mmap] = {}
    for item in keep:
        if isinstance(item, _Files):
            maps.update((id(m), m) for m in item.maps.values())
        elif isinstance(item, np.ndarray) and (owner := _owner(item)) is not None:
            maps[id(owner)] = owner
    for mapping in maps.values():
        if hasattr(mmap, "MADV_DONTNEED") and not mapping.closed:
            mapping.madvise(mmap.MADV_DONTNEED)


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

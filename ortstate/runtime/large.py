"""How large initializers reach ONNX Runtime without the protobuf holding them.

Measured with ONNX Runtime 1.31 (24 f32 weights of 896x4864, 400 MB): inlined in the serialised
model, a session holds ~2.9x the weights after load and peaks at ~5x. So ``StatefulSession``:

- lets ONNX Runtime read a model file's external data (``MODEL.onnx.data``) itself, relative to
  the file's folder (``session.model_external_initializers_file_folder_path``): it maps the file
  and holds one copy after prepacking (peak 1.04x; f16 weights behind a Cast: one f32 copy, peak
  1.35x);
- hands over a converter stub's value and, when the inline initializers pass protobuf's reach,
  the large ones (which: :mod:`ortstate.passes.offload`), with ``add_external_initializers``,
  which copies them into the session (its documented contract).

Once the session exists nothing handed over is needed, and :func:`release_mapped_pages` drops the
pages of the IR's ``.bin`` a conversion read from the process.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import OrtStateError
from ..passes.offload import offload_initializers, offloads_any
from .source import Source

__all__ = ["adds_to_options", "hand_over", "release_mapped_pages"]


def adds_to_options(source: Source) -> bool:
    """Whether loading ``source`` adds to its session options: initializers handed over as values,
    or a model file's external data to be found."""
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in source.model.graph.initializer)
    return external or offloads_any(source.model, source.arrays)


def hand_over(source: Source, options: ort.SessionOptions) -> list[Any]:
    """Tell ``options`` where the model file's external data is, and hand them the initializers
    :func:`~ortstate.passes.offload.offload_initializers` takes out of the model (copied first if
    it is the caller's). Returns what must outlive the session's creation.

    Raises:
        OrtStateError: the model refers to external data but was not opened from its file.
    """
    graph = source.model.graph
    elsewhere = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    elsewhere = [t for t in elsewhere if t.name not in source.arrays]
    if elsewhere and source.base_dir is None:
        location = next((e.value for e in elsewhere[0].external_data if e.key == "location"), "?")
        raise OrtStateError(
            f"initializer '{elsewhere[0].name}' is external data in '{location}': open the model from its file "
            "(a path), or load its data into the ModelProto first"
        )
    if elsewhere:
        # the model file's own external data: ONNX Runtime maps it, relative to the file's folder
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(source.base_dir))
    if not offloads_any(source.model, source.arrays):
        return []
    offloaded = offload_initializers(source.own(), source.arrays)
    values = [ort.OrtValue.ortvalue_from_numpy_with_onnx_type(o.value, o.data_type) for o in offloaded]
    options.add_external_initializers([o.name for o in offloaded], values)
    return [*(o.value for o in offloaded), *values]


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

"""Models past protobuf's 2 GB limit: their large initializers reach ONNX Runtime as OrtValues.

A ``ModelProto`` can't be serialised above 2 GB, and ``StatefulSession`` hands ONNX Runtime the
serialised model it rewrote (fused state ops, or the explicit rewrite). Above :data:`OFFLOAD_ABOVE`
the session moves every initializer of at least :data:`MIN_BYTES` out of that copy: each becomes an
external-data reference (to no file) that ``SessionOptions.add_external_initializers`` fills with
the tensor as an ``OrtValue`` over a numpy array, which the session keeps alive.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from ..protosize import tensor_bytes

__all__ = ["MIN_BYTES", "OFFLOAD_ABOVE", "offload_large_initializers"]

OFFLOAD_ABOVE = 1 << 30  # initializer bytes of the main graph; protobuf's limit is 2 GB
MIN_BYTES = 1 << 20  # smaller initializers stay in the model
_NOWHERE = "ortstate-offloaded-initializer"  # never read: ONNX Runtime is handed the values


def offload_large_initializers(
    model: onnx.ModelProto, options: ort.SessionOptions, in_place: bool = False
) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """``(model, [])`` when small enough; else the model (changed in place if ``in_place``, else a
    copy) without its large initializers' data, which are added to ``options``, and the arrays that
    must outlive the session."""
    sizes = [tensor_bytes(t) for t in model.graph.initializer]
    if sum(sizes) <= OFFLOAD_ABOVE:
        return model, []
    out = model
    if not in_place:
        out = onnx.ModelProto()
        out.CopyFrom(model)
    names: list[str] = []
    arrays: list[np.ndarray] = []
    for tensor, size in zip(out.graph.initializer, sizes):
        if size < MIN_BYTES:  # external and string tensors count as 0
            continue
        array = np.ascontiguousarray(numpy_helper.to_array(tensor))
        name, data_type, dims = tensor.name, tensor.data_type, list(tensor.dims)
        tensor.Clear()  # frees the data held in the model
        tensor.name, tensor.data_type = name, data_type
        tensor.dims.extend(dims)
        for key, value in (("location", _NOWHERE), ("offset", "0"), ("length", str(array.nbytes))):
            tensor.external_data.add(key=key, value=value)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        names.append(name)
        arrays.append(array)
    options.add_external_initializers(names, [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays])
    return out, arrays

"""Sizes of ONNX tensors without serialising them: protobuf can't measure a message past 2 GB
(``ByteSize()`` raises), and a model past 2 GB must be saved and loaded differently."""

from __future__ import annotations

import math

import onnx
from onnx import helper

__all__ = ["PROTOBUF_LIMIT", "initializer_bytes", "tensor_bytes"]

PROTOBUF_LIMIT = 2_000_000_000  # a little under 2 GiB: the rest of the model needs room too


def tensor_bytes(tensor: onnx.TensorProto) -> int:
    """The bytes of a tensor's data, from its dims and type (external data counts as 0)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.data_type == onnx.TensorProto.STRING:
        return 0
    itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return math.prod(tensor.dims) * itemsize


def initializer_bytes(graph: onnx.GraphProto) -> int:
    """The bytes of a graph's initializers (its subgraphs' constants are left out: small)."""
    return sum(tensor_bytes(t) for t in graph.initializer)

"""OpenVINO element types as ONNX tensor types (sub-byte integers widen to 8 bits)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from ..errors import ConversionError
from ..ir import ElementType

__all__ = ["onnx_type", "numpy_type"]

# bf16 values are carried and computed as f32: ONNX Runtime's CPU provider has almost no bf16
# kernels, and every bf16 value is exact in f32. Convert-to-bf16 still rounds (see Convert).

_ONNX = {
    "f64": TensorProto.DOUBLE, "f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16,
    "bf16": TensorProto.FLOAT, "f8e4m3": TensorProto.FLOAT8E4M3FN, "f8e5m2": TensorProto.FLOAT8E5M2,
    "i64": TensorProto.INT64, "i32": TensorProto.INT32, "i16": TensorProto.INT16, "i8": TensorProto.INT8,
    "i4": TensorProto.INT8, "u64": TensorProto.UINT64, "u32": TensorProto.UINT32,
    "u16": TensorProto.UINT16, "u8": TensorProto.UINT8, "u4": TensorProto.UINT8, "u2": TensorProto.UINT8,
    "u1": TensorProto.UINT8, "boolean": TensorProto.BOOL,
}  # fmt: skip


def onnx_type(etype: ElementType | None, where: str = "") -> int:
    """The ONNX ``TensorProto`` type carrying values of ``etype``."""
    if etype is None or etype.name not in _ONNX:
        name = "unknown" if etype is None else etype.name
        raise ConversionError(f"{where}: element type {name} has no ONNX equivalent")
    return _ONNX[etype.name]


def numpy_type(onnx_elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_elem_type))

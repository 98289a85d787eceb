"""OpenVINO element types: names as the IR spells them, storage width and the numpy type we decode to."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["ElementType", "ELEMENT_TYPES", "element_type", "element_type_of_precision"]


@dataclass(frozen=True)
class ElementType:
    """One OpenVINO element type.

    ``dtype`` is what a decoded constant becomes in numpy: sub-byte integer types decode to
    (u)int8, ``nf4`` to float32 (its 16 code values), ``f4e2m1`` to ml_dtypes' one-byte type and
    ``string`` to Python strings (object arrays). ``bits`` says how the type is packed in the
    ``.bin`` (0 for strings, which are length-prefixed). ``dtype`` None would mark a type we can
    parse but not decode; constants of such a type raise :class:`~ortstate.errors.IRError`.
    """

    name: str
    bits: int
    dtype: np.dtype | None


def _t(name: str, bits: int, dtype: object) -> ElementType:
    return ElementType(name, bits, None if dtype is None else np.dtype(dtype))


ELEMENT_TYPES: dict[str, ElementType] = {
    t.name: t
    for t in (
        _t("f64", 64, np.float64),
        _t("f32", 32, np.float32),
        _t("f16", 16, np.float16),
        _t("bf16", 16, ml_dtypes.bfloat16),
        _t("f8e4m3", 8, ml_dtypes.float8_e4m3fn),
        _t("f8e5m2", 8, ml_dtypes.float8_e5m2),
        _t("f8e8m0", 8, ml_dtypes.float8_e8m0fnu),
        _t("f4e2m1", 4, ml_dtypes.float4_e2m1fn),
        _t("nf4", 4, np.float32),
        _t("i64", 64, np.int64),
        _t("i32", 32, np.int32),
        _t("i16", 16, np.int16),
        _t("i8", 8, np.int8),
        _t("i4", 4, np.int8),
        _t("u64", 64, np.uint64),
        _t("u32", 32, np.uint32),
        _t("u16", 16, np.uint16),
        _t("u8", 8, np.uint8),
        _t("u6", 6, np.uint8),
        _t("u4", 4, np.uint8),
        _t("u3", 3, np.uint8),
        _t("u2", 2, np.uint8),
        _t("u1", 1, np.uint8),
        _t("boolean", 8, np.bool_),
        _t("string", 0, object),
    )
}

# Port `precision` attributes spell the same types differently.
_PRECISIONS = {
    "FP64": "f64", "FP32": "f32", "FP16": "f16", "BF16": "bf16", "F8E4M3": "f8e4m3",
    "F8E5M2": "f8e5m2", "F8E8M0": "f8e8m0", "F4E2M1": "f4e2m1", "NF4": "nf4",
    "I64": "i64", "I32": "i32", "I16": "i16", "I8": "i8", "I4": "i4",
    "U64": "u64", "U32": "u32", "U16": "u16", "U8": "u8", "U6": "u6", "U4": "u4",
    "U3": "u3", "U2": "u2", "U1": "u1", "BIN": "u1", "BOOL": "boolean", "BOOLEAN": "boolean",
    "STRING": "string",
}  # fmt: skip

_ALIASES = {"bool": "boolean", "f8e4m3fn": "f8e4m3"}
# Port precisions OpenVINO writes where a port's type is not known yet; such ports have no type.
_UNTYPED = frozenset({"DYNAMIC", "UNSPECIFIED", "UNDEFINED"})


def element_type(name: str) -> ElementType:
    """The element type an IR attribute names (``f32``, ``boolean``, ...).

    Raises:
        KeyError: ``name`` is not an OpenVINO element type.
    """
    key = name.strip().lower()
    return ELEMENT_TYPES[_ALIASES.get(key, key)]


def element_type_of_precision(precision: str) -> ElementType | None:
    """The element type of a port ``precision`` attribute (``FP32``, ``I64``, ...); None for ``DYNAMIC``.

    Raises:
        KeyError: ``precision`` names no OpenVINO element type.
    """
    key = precision.strip().upper()
    if key in _UNTYPED:
        return None
    if key in _PRECISIONS:
        return ELEMENT_TYPES[_PRECISIONS[key]]
    return element_type(key)

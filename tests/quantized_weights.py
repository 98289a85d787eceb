"""Small compressed weights for the compressed-weight unit tests: a :class:`QuantizedWeight` made
directly from codes, and the OpenVINO decompression chain an IR holds for one."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from ortstate.convert.compressed import QuantizedWeight


def quantized(
    codes: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    *,
    bits: int,
    block: int,
    group: int | None = None,
    packed: np.ndarray | None = None,
    name: str = "w",
) -> QuantizedWeight:
    """A weight of unsigned ``codes [rows, k]``, ``scale``/``zero_point [rows, groups]`` (``group``
    None: per channel), as :mod:`~ortstate.convert.compressed.recognise` would read it."""
    rows, k = codes.shape
    stored = np.asarray(codes, np.uint8)
    return QuantizedWeight(
        layer=SimpleNamespace(name=name, id=hash(name) % 1000),
        bits=bits,
        signed=False,
        rows=rows,
        k=k,
        group=k if group is None else group,
        block=block,
        scale=np.asarray(scale, np.float32),
        zero_point=np.asarray(zero_point, np.uint8),
        source=f"u{bits} test",
        stored_bytes=rows * k * bits // 8,
        stored_codes=lambda: stored,
        packed=packed,
    )


def chain(codes: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, ov_type: ov.Type, name: str) -> ov.Node:
    """``Convert((Convert(codes) - zp) * scale)`` as NNCF writes it for ``codes [rows, groups,
    group]`` (a ``Reshape`` to ``[rows, k]``) or ``[rows, k]`` (per channel); scales and zero
    points broadcast against the codes."""
    x = ops.convert(ops.constant(codes.astype(np.int32), dtype=ov_type), "f16")
    if zero_point is not None:
        x = ops.subtract(x, ops.convert(ops.constant(zero_point.astype(np.int32), dtype=ov_type), "f16"))
    x = ops.multiply(x, ops.constant(scale.astype(np.float16)))
    if codes.ndim == 3:
        x = ops.reshape(x, ops.constant(np.array([codes.shape[0], codes.shape[1] * codes.shape[2]], np.int64)), False)
    return ops.convert(x, "f32", name=name)

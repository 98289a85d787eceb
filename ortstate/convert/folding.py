"""Fold constant subgraphs (weight decompression) in numpy, in f32 where OpenVINO writes f16.

``ov.save_model`` and NNCF write compressed weights as chains of constants: ``Convert(Const f16)``,
int8 ``Multiply(Subtract(Convert(u8), Convert(u8 zero point)), f16 scale)``, int4 the same on u4
with a ``Reshape`` of the groups. OpenVINO's CPU plugin decompresses them in f32; computing the
chain literally in f16 (as a translation of its ops would) differs by ~1e-3. Folding here keeps
f32 precision and hands ONNX Runtime one initializer instead of a chain it would fold at load.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..ir import Graph, Layer, element_type

__all__ = ["constant_value", "feeds_only_folds"]

_FOLDABLE = frozenset(
    {"Const", "Convert", "Subtract", "Multiply", "Add", "Reshape", "Transpose", "Unsqueeze", "Squeeze"}
)
# Do not fold what would make one initializer larger than this (keep big tensors compressed).
_MAX_FOLDED_BYTES = 1 << 31

_cache: weakref.WeakKeyDictionary[Graph, dict[int, np.ndarray | None]] = weakref.WeakKeyDictionary()


def constant_value(graph: Graph, layer: Layer) -> np.ndarray | None:
    """``layer``'s (first output's) value when it is computed from constants only, else None.

    f16 arithmetic is carried out in f32 (see the module docstring); callers cast to the port's
    declared type where that matters.
    """
    memo = _cache.setdefault(graph, {})
    if layer.id not in memo:
        memo[layer.id] = _fold(graph, layer, memo)
    return memo[layer.id]


def _fold(graph: Graph, layer: Layer, memo: dict[int, np.ndarray | None]) -> np.ndarray | None:
    if layer.type not in _FOLDABLE or len(layer.outputs) != 1:
        return None
    if layer.type == "Const":
        return graph.constant(layer)
    inputs = []
    for index in range(len(layer.inputs)):
        value = constant_value(graph, graph.producer(layer, index)[0])
        if value is None:
            return None
        inputs.append(np.asarray(value))
    try:
        out = _apply(layer, inputs)
    except (ValueError, KeyError, IndexError, TypeError):
        return None  # leave it to the translator, which reports problems properly
    if out is None or out.nbytes > _MAX_FOLDED_BYTES:
        return None
    return out


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _apply(layer: Layer, xs: list[np.ndarray]) -> np.ndarray | None:
    op, attrs = layer.type, layer.attrs
    if op == "Convert":
        target = element_type(attrs.get("destination_type", "f32"))
        if target.name == "f16":
            return xs[0].astype(np.float32)  # carried wider, as OpenVINO's CPU plugin does
        if target.dtype is None or target.name in ("bf16", "f8e4m3", "f8e5m2", "f8e8m0"):
            return None  # rounding to these is the Convert translator's job
        return _wide(xs[0]).astype(target.dtype)
    if op in ("Subtract", "Multiply", "Add"):
        if attrs.get("auto_broadcast", "numpy").lower() not in ("numpy", "none"):
            return None
        a, b = _wide(xs[0]), _wide(xs[1])
        if a.dtype != b.dtype:
            return None
        fn = {"Subtract": np.subtract, "Multiply": np.multiply, "Add": np.add}[op]
        with np.errstate(all="ignore"):
            return fn(a, b)
    if op == "Reshape":
        shape = [int(d) for d in xs[1].reshape(-1)]
        if attrs.get("special_zero", "false").lower() == "true":
            shape = [xs[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return xs[0].reshape(shape)
    if op == "Transpose":
        order = [int(d) for d in xs[1].reshape(-1)]
        return np.transpose(xs[0], order or None)
    if op == "Unsqueeze":
        axes = sorted(int(a) % (xs[0].ndim + xs[1].size) for a in xs[1].reshape(-1))
        return np.expand_dims(xs[0], axes)
    if op == "Squeeze":
        if len(xs) == 1:
            return np.squeeze(xs[0])
        axes = tuple(int(a) % xs[0].ndim for a in xs[1].reshape(-1))
        return np.squeeze(xs[0], axes) if all(xs[0].shape[a] == 1 for a in axes) else None
    return None


def feeds_only_folds(graph: Graph, layer: Layer) -> bool:
    """True when every consumer of ``layer`` is itself folded: the layer need not be translated."""
    consumers = [dst for index in range(len(layer.outputs)) for dst, _ in graph.consumers(layer, index)]
    return bool(consumers) and all(constant_value(graph, dst) is not None for dst in consumers)

"""One stream of a KV pool as a snapshot file, in the format of :mod:`ortstate.runtime.snapshot`
with the fingerprint of the model as given: a stream saved from a pool loads into a
``StatefulSession`` of the model (one stream) and back."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..errors import StateError
from ..runtime import snapshot
from ..runtime.store import StateStore
from .kv_model import KvModel

__all__ = ["read_stream", "write_stream"]


def write_stream(
    model: KvModel, kv: Sequence[np.ndarray], fixed: Sequence[np.ndarray], path: str | os.PathLike[str]
) -> None:
    """Write one stream's caches (``[1, heads, length, size]``; empty ones stay uninitialised) and
    fixed states."""
    store = StateStore(model.variables)
    for var, value in zip(model.kv, kv):
        if value.shape[2]:
            store.set(var.id, value)
    for spec, value in zip(model.fixed, fixed):
        store.set(spec.var.id, value.astype(np.dtype(spec.var.dtype)))
    snapshot.save_state(store, model.variables, path, model.fingerprint)


def read_stream(model: KvModel, path: str | os.PathLike[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One stream's caches and fixed states from a snapshot, checked before any row changes.

    Raises:
        StateError: what :func:`~ortstate.runtime.snapshot.load_state` refuses, a value that is not
            one stream's, or caches of different lengths.
    """
    store = StateStore(model.variables)
    snapshot.load_state(store, model.variables, path, model.fingerprint)
    kv, lengths = [], set()
    for var, (heads, size) in zip(model.kv, model.kv_shapes):
        value = store.committed(var.id)
        if value is None:
            value = np.zeros((1, heads, 0, size), np.float32)
        if value.ndim != 4 or value.shape[0] != 1 or value.shape[1:2] + value.shape[3:] != (heads, size):
            raise StateError(f"{path}: variable '{var.id}' has shape {list(value.shape)}, not one stream's cache")
        kv.append(np.asarray(value, np.float32))
        lengths.add(value.shape[2])
    if len(lengths) > 1:
        raise StateError(f"{path}: the caches hold different lengths ({sorted(lengths)})")
    fixed = []
    for spec in model.fixed:
        value = store.committed(spec.var.id)
        if value is not None and value.shape != spec.shape:
            raise StateError(f"{path}: variable '{spec.var.id}' has shape {list(value.shape)}, not {list(spec.shape)}")
        fixed.append(np.zeros(spec.shape, spec.carrier) if value is None else value.astype(spec.carrier))
    return kv, fixed

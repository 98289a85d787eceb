"""One stream of a KV pool as a snapshot file, in the format of :mod:`ortstate.runtime.snapshot`
with the fingerprint of the model as given: a stream saved from a pool loads into a
``StatefulSession`` of the model (one stream) and back."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ...errors import StateError
from ...runtime import snapshot
from ...runtime.store import StateStore
from .model import KvModel

__all__ = ["as_values", "from_values", "read_stream", "write_stream"]


def as_values(model: KvModel, kv: Sequence[np.ndarray], fixed: Sequence[np.ndarray]) -> list[np.ndarray | None]:
    """One stream's caches (``[1, heads, length, size]``) and fixed states as its variables' values,
    in the model's order: an empty cache None (uninitialised), a fixed state in its variable's dtype."""
    by_id: dict[str, np.ndarray | None] = {var.id: v if v.shape[2] else None for var, v in zip(model.kv, kv)}
    by_id.update({spec.var.id: value.astype(np.dtype(spec.var.dtype)) for spec, value in zip(model.fixed, fixed)})
    return [by_id[var.id] for var in model.variables]


def from_values(
    model: KvModel, values: Sequence[np.ndarray | None], where: str
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """:func:`as_values`' inverse, checked before any row changes: one stream's caches (None: empty)
    and fixed states (None: zeros).

    Raises:
        StateError: not one value per variable, a value that is not one stream's, or caches of
            different lengths (naming ``where``).
    """
    if not isinstance(values, Sequence) or len(values) != len(model.variables):
        raise StateError(f"{where}: a stream's values are one per variable of the model ({len(model.variables)})")
    by_id = {var.id: value for var, value in zip(model.variables, values)}
    if any(v is not None and not isinstance(v, np.ndarray) for v in by_id.values()):
        raise StateError(f"{where}: a stream's values are numpy arrays (or None)")
    kv, lengths = [], set()
    for var, (heads, size) in zip(model.kv, model.kv_shapes):
        value = by_id[var.id]
        if value is None:
            value = np.zeros((1, heads, 0, size), np.float32)
        if value.ndim != 4 or value.shape[0] != 1 or value.shape[1:2] + value.shape[3:] != (heads, size):
            raise StateError(f"{where}: variable '{var.id}' has shape {list(value.shape)}, not one stream's cache")
        kv.append(np.array(value, np.float32))  # its own: the caller may change what it gave
        lengths.add(value.shape[2])
    if len(lengths) > 1:
        raise StateError(f"{where}: the caches hold different lengths ({sorted(lengths)})")
    fixed = []
    for spec in model.fixed:
        value = by_id[spec.var.id]
        if value is not None and value.shape != spec.shape:
            raise StateError(f"{where}: variable '{spec.var.id}' has shape {list(value.shape)}, not {list(spec.shape)}")
        fixed.append(np.zeros(spec.shape, spec.carrier) if value is None else value.astype(spec.carrier))
    return kv, fixed


def write_stream(
    model: KvModel, kv: Sequence[np.ndarray], fixed: Sequence[np.ndarray], path: str | os.PathLike[str]
) -> None:
    """Write one stream's caches (``[1, heads, length, size]``; empty ones stay uninitialised) and
    fixed states."""
    store = StateStore(model.variables)
    for var, value in zip(model.variables, as_values(model, kv, fixed)):
        if value is not None:
            store.set(var.id, value)
    snapshot.save_state(store, model.variables, path, model.fingerprint)


def read_stream(model: KvModel, path: str | os.PathLike[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One stream's caches and fixed states from a snapshot, checked before any row changes.

    Raises:
        StateError: what :func:`~ortstate.runtime.snapshot.load_state` refuses, or what
            :func:`from_values` refuses.
    """
    store = StateStore(model.variables)
    snapshot.load_state(store, model.variables, path, model.fingerprint)
    return from_values(model, [store.committed(var.id) for var in model.variables], str(path))

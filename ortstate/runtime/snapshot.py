"""Portable state snapshots: an ``.npz`` with each variable's value and a fingerprint of the model's variables."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import ml_dtypes  # noqa: F401  (np.dtype("bfloat16"))
import numpy as np

from ..errors import StateError
from ..model_meta import VariableMeta
from .store import StateStore

__all__ = ["fingerprint", "load_state", "save_state"]

_FORMAT = "ortstate-state-1"
# numpy's npz cannot hold ml_dtypes types: such values are stored as their raw bits.
_RAW_BITS = {"bfloat16": np.uint16}


def fingerprint(variables: tuple[VariableMeta, ...]) -> str:
    """A hash of the variables' ids, element types and shapes: the same for both ONNX forms."""
    key = json.dumps([[v.id, v.element_type, v.shape] for v in variables])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def save_state(store: StateStore, variables: tuple[VariableMeta, ...], path: str | os.PathLike[str]) -> None:
    """Write every initialised variable of ``store`` (uninitialised ones stay so after loading)."""
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for index, v in enumerate(variables):
        if not store.initialized(v.id):
            entries.append({"id": v.id, "initialized": False})
            continue
        value = store.get(v.id)
        raw = _RAW_BITS.get(value.dtype.name)
        arrays[f"v{index}"] = value.view(raw) if raw else value
        entries.append({"id": v.id, "initialized": True, "dtype": value.dtype.name, "shape": list(value.shape)})
    header = {"format": _FORMAT, "fingerprint": fingerprint(variables), "variables": entries}
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as f:  # np.savez would append ".npz" to a bare path
        np.savez(f, **arrays)


def load_state(store: StateStore, variables: tuple[VariableMeta, ...], path: str | os.PathLike[str]) -> None:
    """Replace ``store``'s values with the snapshot's, all or nothing.

    Raises:
        StateError: the file is missing, corrupted, or from a model with other variables.
    """
    where = str(path)
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            header = json.loads(bytes(data["header"]).decode())
            arrays = {k: data[k] for k in data.files if k != "header"}
    except FileNotFoundError:
        raise StateError(f"{where}: no such file") from None
    except (OSError, ValueError, KeyError, UnicodeDecodeError, zipfile.BadZipFile, EOFError) as exc:
        raise StateError(f"{where}: not a readable ortstate state snapshot ({type(exc).__name__})") from None
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise StateError(f"{where}: not an ortstate state snapshot")
    if header.get("fingerprint") != fingerprint(variables):
        raise StateError(f"{where}: snapshot is from a model with other variables (fingerprint mismatch)")
    entries = header.get("variables")
    if not isinstance(entries, list) or [e.get("id") for e in entries] != [v.id for v in variables]:
        raise StateError(f"{where}: snapshot variable list is corrupted")
    values: dict[str, np.ndarray] = {}
    for index, entry in enumerate(entries):
        if not entry.get("initialized"):
            continue
        array = arrays.get(f"v{index}")
        if array is None:
            raise StateError(f"{where}: snapshot has no value for variable '{entry['id']}'")
        dtype = str(entry.get("dtype"))
        if dtype in _RAW_BITS:
            array = array.view(np.dtype(dtype))
        if array.dtype.name != dtype or list(array.shape) != entry.get("shape"):
            raise StateError(f"{where}: snapshot value of variable '{entry['id']}' is corrupted")
        values[entry["id"]] = array
    staged = StateStore(variables)
    try:
        for var_id, value in values.items():
            staged.set(var_id, value)  # validates dtype and shape against the variable
    except StateError as exc:
        raise StateError(f"{where}: {exc}") from None
    store.replace(staged.values)

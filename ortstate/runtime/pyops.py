"""The ReadValue/Assign Python ops (onnxruntime-extensions) and the live request stores they serve.

Facts this module is built around (see DESIGN.md): an exception inside a PyOp kills the process,
so op bodies never raise; f16/bf16 cannot cross (the converter casts them to f32); every op must be
registered before any session exists, so all overloads are registered at import; the default
output path converts through Python lists, so we install a hook that hands back ndarrays after
checking their dtype and size ourselves (the C++ side copies raw bytes).
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING

import numpy as np
from onnxruntime_extensions import PyCustomOpDef, _ocos, get_library_path

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["library_path", "register_store", "unregister_store"]

_CARRIERS: dict[np.dtype, int] = {
    np.dtype(np.float32): PyCustomOpDef.dt_float,
    np.dtype(np.float64): PyCustomOpDef.dt_double,
    np.dtype(np.int64): PyCustomOpDef.dt_int64,
    np.dtype(np.int32): PyCustomOpDef.dt_int32,
    np.dtype(np.int16): PyCustomOpDef.dt_int16,
    np.dtype(np.int8): PyCustomOpDef.dt_int8,
    np.dtype(np.uint64): PyCustomOpDef.dt_uint64,
    np.dtype(np.uint32): PyCustomOpDef.dt_uint32,
    np.dtype(np.uint16): PyCustomOpDef.dt_uint16,
    np.dtype(np.uint8): PyCustomOpDef.dt_uint8,
    np.dtype(np.bool_): PyCustomOpDef.dt_bool,
}
_TOKEN = np.ones((), dtype=np.bool_)

_stores: dict[int, StateStore] = {}
_keys = itertools.count(1)
_stores_lock = threading.Lock()


def register_store(store: StateStore) -> int:
    """Give a request's store a key; the model's request input carries it to the ops."""
    with _stores_lock:
        key = next(_keys)
        _stores[key] = store
    return key


def unregister_store(key: int) -> None:
    with _stores_lock:
        _stores.pop(key, None)


def library_path() -> str:
    return get_library_path()


def _read_value(init: np.ndarray, key: np.ndarray, variable_id: str) -> np.ndarray:
    store = _stores.get(int(key))
    if store is None:
        return init
    try:
        return store.read(variable_id, init)
    except Exception as exc:  # noqa: BLE001 - raising here would abort the process
        store.fail(f"ReadValue '{variable_id}': {exc}")
        return init


def _assign(value: np.ndarray, key: np.ndarray, variable_id: str) -> np.ndarray:
    store = _stores.get(int(key))
    if store is not None:
        try:
            store.stage(variable_id, value)
        except Exception as exc:  # noqa: BLE001 - raising here would abort the process
            store.fail(f"Assign '{variable_id}': {exc}")
    return _TOKEN


# k_id -> (body, output dtypes)
_OURS: dict[int, tuple[object, tuple[np.dtype, ...]]] = {}


def _register() -> None:
    for dtype, dt in _CARRIERS.items():
        for op_type, body, out in (("ReadValue", _read_value, dtype), ("Assign", _assign, np.dtype(np.bool_))):
            opdef = _ocos.Opdef.create(
                body,
                op_type=op_type,
                inputs=[dt, PyCustomOpDef.dt_int64],
                outputs=[_CARRIERS[out]],
                attrs={"variable_id": PyCustomOpDef.dt_string},
            )
            _OURS[id(opdef)] = (body, (out,))


_default_hook = _ocos._on_pyop_invocation


def _hook(k_id: int, feed: tuple, attributes: dict) -> tuple:
    """Call our ops without the list round trip; everything else goes the default way."""
    entry = _OURS.get(k_id)
    if entry is None:
        return _default_hook(k_id, feed, attributes)
    body, (dtype,) = entry
    out = body(*feed, attributes.get("variable_id", ""))  # type: ignore[operator]
    if out.dtype != dtype or not out.flags.c_contiguous:
        out = np.ascontiguousarray(out, dtype=dtype)
    return (k_id, out.shape, out)


_register()
PyCustomOpDef.install_hooker(_hook)

"""The ReadValue/Assign Python ops (onnxruntime-extensions) and the live request stores they serve.

Facts this module is built around (see DESIGN.md): an exception inside a PyOp kills the process,
so op bodies never raise; f16/bf16 cannot cross (the converter casts them to f32); every op must be
registered before any session exists, so all overloads are registered at import; the default
output path converts through Python lists, so we install a hook that hands back ndarrays after
checking their dtype and size ourselves (the C++ side copies raw bytes).
"""

from __future__ import annotations

import json
import secrets
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
from onnxruntime_extensions import PyCustomOpDef, _ocos, get_library_path

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["DOMAIN", "library_path", "register_store", "unregister_store"]

DOMAIN = "ai.onnx.contrib"  # the only domain onnxruntime-extensions serves Python ops from by default

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
_stores_lock = threading.Lock()


def register_store(store: StateStore) -> int:
    """Give a request's store a key; the model's request input carries it to the ops.

    Keys are random (63 bits), not counted: a model could otherwise reach another session's
    variables with a constant key (the runtime also checks that every state op takes the request
    input as its key before the session is made).
    """
    with _stores_lock:
        key = secrets.randbits(63)
        while key in _stores or key == 0:
            key = secrets.randbits(63)
        _stores[key] = store
    return key


def unregister_store(key: int) -> None:
    with _stores_lock:
        _stores.pop(key, None)


def library_path() -> str:
    return get_library_path()


def _store(key: np.ndarray) -> StateStore | None:
    try:
        return _stores.get(int(key))
    except Exception:  # noqa: BLE001 - raising here would abort the process
        return None


def _read_value(init: np.ndarray, key: np.ndarray, variable_id: str) -> np.ndarray:
    store = _store(key)
    if store is None:
        return init
    try:
        return store.read(variable_id, init)
    except Exception as exc:  # noqa: BLE001 - raising here would abort the process
        store.fail(f"ReadValue '{variable_id}': {exc}")
        return init


def _assign(value: np.ndarray, key: np.ndarray, variable_id: str) -> np.ndarray:
    store = _store(key)
    if store is not None:
        try:
            store.stage(variable_id, value)
        except Exception as exc:  # noqa: BLE001 - raising here would abort the process
            store.fail(f"Assign '{variable_id}': {exc}")
    return _TOKEN


def _read_values(*args: np.ndarray, variable_ids: str) -> tuple[np.ndarray, ...]:
    """Fused ReadValue of several variables of one dtype (see :mod:`.fuse`)."""
    *inits, key = args
    store = _store(key)
    if store is None:
        return tuple(inits)
    try:
        values = store.values
        return tuple(init if (v := values.get(i)) is None else v for i, init in zip(_ids(variable_ids), inits))
    except Exception as exc:  # noqa: BLE001 - raising here would abort the process
        store.fail(f"ReadValue {variable_ids}: {exc}")
        return tuple(inits)


def _assign_values(*args: np.ndarray, variable_ids: str) -> np.ndarray:
    """Fused Assign of several variables of one dtype (see :mod:`.fuse`)."""
    *values, key = args
    store = _store(key)
    if store is not None:
        try:
            store.pending.update(zip(_ids(variable_ids), values))
        except Exception as exc:  # noqa: BLE001 - raising here would abort the process
            store.fail(f"Assign {variable_ids}: {exc}")
    return _TOKEN


_ID_LISTS: dict[str, list[str]] = {}


def _ids(variable_ids: str) -> list[str]:
    ids = _ID_LISTS.get(variable_ids)
    if ids is None:
        ids = _ID_LISTS[variable_ids] = json.loads(variable_ids)
    return ids


# Fused state ops exist for 2..MAX_FUSED variables of one dtype; larger groups are split.
MAX_FUSED = 16

# k_id -> (body, attribute name, output dtypes)
_OURS: dict[int, tuple[Any, str, tuple[np.dtype, ...]]] = {}


def _add(body: Any, op_type: str, inputs: list[int], outputs: list[np.dtype], attr: str) -> None:
    opdef = _ocos.Opdef.create(
        body,
        op_type=op_type,
        inputs=inputs,
        outputs=[_CARRIERS[o] for o in outputs],
        attrs={attr: PyCustomOpDef.dt_string},
    )
    _OURS[id(opdef)] = (body, attr, tuple(outputs))


def _register() -> None:
    token = np.dtype(np.bool_)
    key = PyCustomOpDef.dt_int64
    for dtype, dt in _CARRIERS.items():
        _add(_read_value, "ReadValue", [dt, key], [dtype], "variable_id")
        _add(_assign, "Assign", [dt, key], [token], "variable_id")
        for n in range(2, MAX_FUSED + 1):
            _add(_read_values, f"ReadValues{n}", [dt] * n + [key], [dtype] * n, "variable_ids")
            _add(_assign_values, f"AssignValues{n}", [dt] * n + [key], [token], "variable_ids")


_default_hook = _ocos._on_pyop_invocation


def _hook(k_id: int, feed: tuple, attributes: dict) -> tuple:
    """Call our ops without the list round trip; everything else goes the default way.

    The C++ side copies each returned array's raw bytes into an output of the returned shape,
    so every array is made contiguous and of its declared dtype first.
    """
    entry = _OURS.get(k_id)
    if entry is None:
        return _default_hook(k_id, feed, attributes)
    body, attr, dtypes = entry
    out = body(*feed, **{attr: attributes.get(attr, "")})
    if len(dtypes) == 1:
        out = (out,)
    result: list[Any] = [k_id]
    for arr, dtype in zip(out, dtypes):
        if arr.dtype != dtype or not arr.flags.c_contiguous:
            arr = np.asarray(arr, dtype=dtype, order="C")  # keeps 0-d arrays 0-d
        result.append(arr.shape)
        result.append(arr)
    return tuple(result)


_register()
PyCustomOpDef.install_hooker(_hook)

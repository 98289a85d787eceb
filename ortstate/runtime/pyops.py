"""The ReadValue/Assign Python ops (onnxruntime-extensions) and the live request stores they serve.

Facts this module is built around (docs/internals.md has them all): an exception inside a Python op kills the
process, so op bodies never raise (they record the problem in the store, whose commit raises
after the run); f16/bf16 cannot cross (the converter carries them as f32); every op must be
registered before any session exists, so all overloads are registered at import, through
:mod:`.ort_adapter`, which also hands their outputs back without the default list round trip.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Sequence

import numpy as np

from ..meta import (
    ASSIGN,
    FUSED_ASSIGN,
    FUSED_READ,
    FUSED_READ_STATES,
    MAX_FUSED,
    READ_VALUE,
    VARIABLE_ID,
    VARIABLE_IDS,
    fused_op,
    shown_id,
)
from .ort_adapter import PYOP_DTYPES, custom_op_library, register_pyop
from .store import StateStore, VariableGroup

__all__ = ["library_path", "live_stores", "register_store", "unregister_store"]

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
    """The custom-op library a session of the custom-op form registers on its options."""
    return custom_op_library()


def live_stores() -> int:
    """How many request stores the ops can reach (each is freed with its request)."""
    with _stores_lock:
        return len(_stores)


def _store(key: np.ndarray) -> StateStore | None:
    try:
        return _stores.get(key.item())
    except Exception:  # noqa: BLE001 - raising here would abort the process
        return None


# The op bodies, called by the adapter's hook with the list of input arrays (the request key last)
# and the op's one attribute. They never raise (see the module doc); each is one function, the fused
# ones on the hot path of every step.


def _read_value(feed: list[np.ndarray], variable_id: str) -> np.ndarray:
    init, key = feed
    store = _store(key)
    if store is None:
        return init
    try:
        return store.read(variable_id, init)
    except Exception as exc:  # noqa: BLE001 - raising here would abort the process
        store.fail(f"ReadValue {shown_id(variable_id)}: {exc}")
        return init


def _assign(feed: list[np.ndarray], variable_id: str) -> np.ndarray:
    value, key = feed
    store = _store(key)
    if store is not None:
        try:
            store.stage(variable_id, value)
        except Exception as exc:  # noqa: BLE001 - raising here would abort the process
            store.fail(f"Assign {shown_id(variable_id)}: {exc}")
    return _TOKEN


def _read_values(feed: list[np.ndarray], variable_ids: str) -> Sequence[np.ndarray]:
    """Fused ReadValue of several variables of one dtype (see :mod:`ortstate.passes.fuse`); ``feed``
    is their inits, then the key."""
    store = None
    try:
        store = _stores.get(feed[-1].item())
        if store is not None:
            group = _groups.get(variable_ids) or _group(variable_ids)
            return store.read_many(group, feed)
    except Exception as exc:  # noqa: BLE001 - raising here would abort the process
        if store is not None:
            store.fail(f"ReadValue {variable_ids}: {exc}")
    return feed[:-1]


_NOTHING = np.zeros(0, np.float32)  # what a read of a key no request owns gives (converted to the op's dtype)


def _read_states(feed: list[np.ndarray], variable_ids: str) -> Sequence[np.ndarray]:
    """Fused ReadValue of variables whose init is zeros of their init shape (see
    :mod:`ortstate.passes.fuse`); ``feed`` is the key alone, the store makes the zeros."""
    store = group = None
    try:
        group = _groups.get(variable_ids) or _group(variable_ids)
        store = _stores.get(feed[-1].item())
        if store is not None:
            return store.read_many(group, ())
    except Exception as exc:  # noqa: BLE001 - raising here would abort the process
        if store is not None:
            store.fail(f"ReadValue {variable_ids}: {exc}")
            try:  # the run fails after it; meanwhile the model gets values of the right shapes
                return [store.carried(i, {}) for i in group.ids]  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001, S110 - as above
                pass
    return [_NOTHING] * MAX_FUSED  # the hook takes as many as the op has outputs


def _read_state(feed: list[np.ndarray], variable_ids: str) -> np.ndarray:
    """:func:`_read_states` of one variable (an op of one output gives an array, not a list)."""
    return _read_states(feed, variable_ids)[0]


def _assign_values(feed: list[np.ndarray], variable_ids: str) -> np.ndarray:
    """Fused Assign of several variables of one dtype (see :mod:`ortstate.passes.fuse`); ``feed`` is
    their values, then the key."""
    store = None
    try:
        store = _stores.get(feed[-1].item())
        if store is not None:
            store.stage_many(_groups.get(variable_ids) or _group(variable_ids), feed)
    except Exception as exc:  # noqa: BLE001 - raising here would abort the process
        if store is not None:
            store.fail(f"Assign {variable_ids}: {exc}")
    return _TOKEN


_groups: dict[str, VariableGroup] = {}


def _group(variable_ids: str) -> VariableGroup:
    """The group a fused op's ``variable_ids`` attribute (a JSON list) names, made once."""
    ids = json.loads(variable_ids)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError(f"variable_ids is not a list of variable ids: {variable_ids!r}")
    group = _groups[variable_ids] = VariableGroup(ids)
    return group


def _register() -> None:
    token = np.dtype(np.bool_)
    key = np.dtype(np.int64)
    for dtype in PYOP_DTYPES:
        register_pyop(_read_value, READ_VALUE, [dtype, key], [dtype], VARIABLE_ID)
        register_pyop(_assign, ASSIGN, [dtype, key], [token], VARIABLE_ID)
        register_pyop(_read_state, fused_op(FUSED_READ_STATES, 1, dtype.name), [key], [dtype], VARIABLE_IDS)
        for n in range(2, MAX_FUSED + 1):
            register_pyop(_read_values, fused_op(FUSED_READ, n), [dtype] * n + [key], [dtype] * n, VARIABLE_IDS)
            states = fused_op(FUSED_READ_STATES, n, dtype.name)
            register_pyop(_read_states, states, [key], [dtype] * n, VARIABLE_IDS)
            register_pyop(_assign_values, fused_op(FUSED_ASSIGN, n), [dtype] * n + [key], [token], VARIABLE_IDS)


_register()

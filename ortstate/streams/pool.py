"""What every pool of streams is (:class:`Pool`), and the one call that opens the pool a model needs
(:func:`StreamPool`).

Two pools keep streams of a stateful model, each stream as if alone in a ``StatefulSession``:

- :class:`~.slot_pool.SlotPool`, for a model whose variables have a fixed size per stream (recurrent
  nets, SSM language models): each stream a slot of the pool's state arrays;
- :class:`~.kv.pool.KvPool`, for a decoder whose variables grow (KV caches): each stream a row of
  one KV arena, under a memory budget (``kv_cache_bytes``) and a context (``max_context``).

Both are a :class:`Pool`: the same calls, the same meaning (tests/streams/test_pools.py runs every
member on both). :func:`StreamPool` reads the model once and opens the one its variables need.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import onnxruntime as ort

from ..errors import OrtStateError
from ..runtime import LoadedModel
from ..runtime.source import read_source
from .kv.model import wants_kv_pool
from .kv.pool import KvPool
from .slot_pool import SlotPool
from .stats import PoolStats

if TYPE_CHECKING:
    from .loop import PoolLoop

__all__ = ["Pool", "StreamPool"]


@runtime_checkable
class Pool(Protocol):
    """Streams of one stateful model stepped together (see the module docstring); stream ids are
    ints, never reused. Every method takes the pool's lock: from an event loop, go through
    :meth:`submit` and :meth:`call` instead, which hand the work to the pool's thread."""

    slots: int  # how many streams hold a row of the pool's state at once
    # the worker every pool has (its PoolLoop: one thread, one queue), and its two methods, the pool's:
    worker: PoolLoop

    def open(self) -> int:
        """A new stream at the model's initial state; its id."""
        ...

    def close(self, sid: int) -> None:
        """End stream ``sid`` and free what it held."""
        ...

    def reset(self, sid: int) -> None:
        """Put stream ``sid`` back at the initial state."""
        ...

    def step(self, feeds: Mapping[int, Mapping[str, Any]], errors: str = "raise") -> dict[int, Any]:
        """Step each stream of ``feeds`` once (``{stream id: {input: array}}``); ``{stream id:
        {output: array}}``, or (``errors="return"``) a failed stream's error as its entry."""
        ...

    async def submit(self, sid: int, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Step stream ``sid`` once, batched with the other streams submitted in the same tick."""
        ...

    async def call(self, fn: Callable[..., Any], /, *args: Any, sid: Any = None) -> Any:
        """``fn(*args)`` run by the pool's thread between two ticks."""
        ...

    def save(self, sid: int, path: str | os.PathLike[str]) -> None:
        """Write stream ``sid``'s variables as a snapshot its ``StatefulSession`` loads too."""
        ...

    def load(self, path: str | os.PathLike[str]) -> int:
        """A new stream at a snapshot's state; its id."""
        ...

    @property
    def variables(self) -> tuple[str, ...]:
        """The ids of the model's variables, in the order of :meth:`values` (a session's order)."""
        ...

    def values(self, sid: int) -> list[np.ndarray | None]:
        """Stream ``sid``'s variables, one stream's each (None: not initialised), as :meth:`restore`
        and :meth:`put` take them."""
        ...

    def restore(self, values: Sequence[np.ndarray | None]) -> int:
        """A new stream holding ``values``; its id."""
        ...

    def put(self, sid: int, values: Sequence[np.ndarray | None]) -> None:
        """Set stream ``sid``'s variables to ``values``."""
        ...

    def park(self, sid: int) -> None:
        """Move stream ``sid``'s state to a file in ``park_dir`` and free its row."""
        ...

    def park_idle(self, seconds: float) -> list[int]:
        """Park every stream that has not stepped for ``seconds``; their ids."""
        ...

    def stats(self) -> PoolStats:
        """Streams, rows, state memory, runs, batch sizes and latencies so far."""
        ...

    @property
    def loaded(self) -> LoadedModel:
        """The model as the pool runs it."""
        ...

    @property
    def streams(self) -> list[int]:
        """The ids of the open streams (parked and preempted ones included)."""
        ...


def StreamPool(  # named as the pool users make: which class it makes depends on the model
    model: Any,
    slots: int | None = None,
    *,
    park_dir: str | os.PathLike[str] | None = None,
    max_batch: int | None = None,
    max_delay: float = 0.002,
    sess_options: ort.SessionOptions | None = None,
    providers: Sequence[str] | None = None,
    kv_cache_bytes: int | None = None,
    max_context: int | None = None,
) -> SlotPool | KvPool:
    """The pool of streams ``model`` needs: a :class:`~.kv.pool.KvPool` for a decoder whose variables
    grow (KV caches), else a :class:`~.slot_pool.SlotPool`; either is a :class:`Pool`.

    Args:
        model: an IR ``.xml``, an ONNX path, its bytes or an ``onnx.ModelProto``, as
            ``StatefulSession`` takes (read once, here).
        slots: how many streams hold a row at once (default: 1024, a KV pool's 256).
        park_dir, max_batch, max_delay, sess_options, providers: as both pools take them.
        kv_cache_bytes, max_context: a KV pool's (refused for any other model).

    Raises:
        OrtStateError: what either pool refuses; ``kv_cache_bytes`` or ``max_context`` for a model
            without KV caches.
    """
    source = read_source(model)
    common: dict[str, Any] = dict(
        park_dir=park_dir, max_batch=max_batch, max_delay=max_delay, sess_options=sess_options, providers=providers
    )
    if slots is not None:
        common["slots"] = slots
    if wants_kv_pool(source):
        if max_context is not None:
            common["max_context"] = max_context
        return KvPool(source, kv_cache_bytes=kv_cache_bytes, **common)
    if kv_cache_bytes is not None or max_context is not None:
        raise OrtStateError("kv_cache_bytes and max_context apply to a decoder with KV caches; this model has none")
    return SlotPool(source, **common)

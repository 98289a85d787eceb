"""The one-token steps of many streams of a KV pool given as one batch (``KvPool.decode``).

What a caller that steps many streams at every tick (a continuous-batching engine) has at hand is
already a batch: one token per stream, positions, a mask. Handing it over as one dict per stream
costs a dict, its arrays and their checks per stream and per tick, and the pool then joins them
again; at a small model's run of a few hundred microseconds that Python work is most of a tick.
So the batch comes as Hugging Face batches it, checked once per input:

- every input holds the streams' rows stacked along its batch axis, row ``i`` what a lone session
  of stream ``i`` is fed (one token);
- ``attention_mask`` is each row's own mask right-aligned, left-padded to the widest row: a row's
  own covers its past and its token (``past + 1`` columns, the batch ``max(past) + 1`` wide), or
  its token only (every row 1 column wide, as the mamba family's decode steps take it);
- ``beam_idx``: each row continues its own cache (its values are not read);
- an input the rows of a run share (``cache_position``) holds one value, fed to every row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import RunError
from .model import MASK, ROWS, FeedSpec, check_names

__all__ = ["check_batch_feeds", "split_batch", "stack_outputs"]


def check_batch_feeds(
    sids: Sequence[int], given: Any, specs: Sequence[FeedSpec], pasts: np.ndarray, max_context: int
) -> dict[str, np.ndarray]:
    """The batch's inputs as arrays (streams ``sids``, whose caches hold ``pasts`` positions).

    Raises:
        RunError: not a mapping, a missing or unknown input, a wrong dtype or rank, a number of rows
            other than the streams', more than one token per stream, a mask of another width, a
            stream already at ``max_context``.
    """
    who = f"streams {', '.join(map(str, sids))}" if len(sids) <= 8 else f"{len(sids)} streams"
    check_names(who, given, specs)
    count = len(sids)
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        value = given[spec.name]
        arr = value if type(value) is np.ndarray else np.asarray(value)
        if arr.dtype != spec.dtype:
            raise RunError(f"{who}: input '{spec.name}' must be {spec.dtype}, got {arr.dtype}")
        rows = spec.axis is None or (arr.ndim == spec.rank and arr.shape[spec.axis] == count)
        if arr.ndim != spec.rank or not rows:
            raise RunError(
                f"{who}: input '{spec.name}' has shape {list(arr.shape)}; the batch's has rank {spec.rank} with "
                f"{count} rows along axis {spec.axis}"
            )
        one = spec.axis is None or spec.name in (MASK, ROWS) or arr.shape[spec.axis + 1] == 1
        if not one:
            raise RunError(f"{who}: input '{spec.name}' has {arr.shape[spec.axis + 1]} positions: one token a stream")
        arrays[spec.name] = arr
    full = np.flatnonzero(pasts >= max_context)
    if full.size:
        raise RunError(
            f"stream {sids[full[0]]}: {pasts[full[0]]} + 1 positions are over the pool's max_context of {max_context}"
        )
    mask = arrays.get(MASK)
    wide = int(pasts.max()) + 1
    if mask is not None and mask.shape[1] not in (1, wide):
        raise RunError(
            f"{who}: attention_mask has {mask.shape[1]} columns; the streams' pasts and tokens need {wide} "
            "(or 1: the new tokens only)"
        )
    return arrays


def split_batch(arrays: Mapping[str, np.ndarray], specs: Sequence[FeedSpec], pasts: np.ndarray) -> list[dict]:
    """The batch as one lone session's feeds per stream (what ``KvPool.step`` takes)."""
    width = arrays[MASK].shape[1] if MASK in arrays else 1
    out = []
    for i, past in enumerate(pasts.tolist()):
        feeds = {}
        for spec in specs:
            arr = arrays[spec.name]
            if spec.axis is None:
                feeds[spec.name] = arr
            elif spec.name == MASK:
                feeds[spec.name] = arr[i : i + 1, width - min(width, past + 1) :]
            else:
                feeds[spec.name] = arr[(slice(None),) * spec.axis + (slice(i, i + 1),)]
        out.append(feeds)
    return out


def stack_outputs(names: Sequence[str], results: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Each output's rows of the streams' results, stacked in their order."""
    return {name: np.concatenate([r[name] for r in results]) for name in names}

"""The beam reorder a variable's metadata asks of the runtime (``VariableMeta.reorder``): the rows of
its value, along axis 0, picked by a graph input's indices before a run reads them.

The graph leaves it to the runtime so that a step whose indices are ``0..n-1`` (greedy decoding,
sampling, a single stream) copies nothing; only a beam search that changes its beams pays for one
copy of the cache. The semantics are OpenVINO's Gather-8 on axis 0: a negative index counts from
the end, and an index out of range gives a row of zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["reorder_indices", "reordered"]


def reorder_indices(feeds: Mapping[str, Any], name: str, rows: int) -> np.ndarray | None:
    """The indices to reorder a value of ``rows`` rows by, or None where that changes nothing (the
    identity) or the feed is not a 1-D integer array (ONNX Runtime then refuses the run itself)."""
    given = feeds.get(name)
    if given is None:
        return None
    indices = np.asarray(given)
    if indices.ndim != 1 or indices.dtype.kind not in "iu":
        return None
    if len(indices) == rows and (indices.tolist() == list(range(rows)) if rows <= 16 else _identity(indices)):
        return None  # a few rows (a lone stream's one): compared as a list, ~10x cheaper than in numpy
    return indices


def _identity(indices: np.ndarray) -> bool:
    return bool(np.array_equal(indices, np.arange(len(indices))))


def reordered(value: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``value``'s rows picked by ``indices`` as OpenVINO's Gather does (a new array)."""
    rows = value.shape[0]
    wrapped = np.where(indices < 0, indices.astype(np.int64) + rows, indices.astype(np.int64))
    valid = (wrapped >= 0) & (wrapped < rows)
    out = (
        np.take(value, np.where(valid, wrapped, 0), axis=0)
        if rows
        else np.zeros((len(indices), *value.shape[1:]), value.dtype)
    )
    if not valid.all():
        out[~valid] = 0
    return out

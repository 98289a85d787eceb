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

__all__ = ["identity_rows", "reorder_feed", "reordered"]


def reorder_feed(feeds: Mapping[str, Any], name: str) -> np.ndarray | None:
    """Input ``name``'s indices, or None where it is not fed or not a 1-D integer array (ONNX Runtime
    then refuses the run itself)."""
    given = feeds.get(name)
    if given is None:
        return None
    indices = given if type(given) is np.ndarray else np.asarray(given)
    if indices.ndim != 1 or indices.dtype.kind not in "iu":
        return None
    return indices


def identity_rows(indices: np.ndarray) -> int | None:
    """The row count ``indices`` leave as they are (``0..n-1``: ``n``), None for any other indices:
    a value of that many rows is not reordered, one of any other count is."""
    n = len(indices)
    if n <= 16:  # a few rows (a lone stream's one): compared as a list, ~10x cheaper than in numpy
        return n if indices.tolist() == list(range(n)) else None
    return n if np.array_equal(indices, np.arange(n)) else None


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

"""Which stepping streams of a KV pool share a run: a pure function of their rows and of how the
model batches (:mod:`.probe`).

- one-token steps whose ``attention_mask`` covers past and current positions, of a model that
  batches *ragged*: one run over the block of arena rows they span, whatever their lengths;
- other one-token steps, and fresh prompts of one length where the model takes them together:
  per cache length, width and mask shape (and per value of an input the rows of a run share),
  split into runs of consecutive rows (a hole in the block would have another length);
- every other step of several tokens (a prompt over a past): a run of its own.
"""

from __future__ import annotations

import numpy as np

from .model import MASK, KvModel
from .probe import RAGGED, SINGLE
from .run import Row

__all__ = ["group_rows"]


def group_rows(rows: dict[int, Row], model: KvModel) -> list[tuple[bool, list[int]]]:
    """The runs of a step: ``(ragged, stream ids)`` each, the ids in slot order."""
    groups: dict[tuple, list[int]] = {}
    for sid, row in rows.items():
        if model.batching == SINGLE or (row.width > 1 and (row.past or not model.prompts_batch)):
            groups[("alone", sid)] = [sid]  # the kernel takes several new tokens with a past at batch 1 only
            continue
        shared = tuple(np.asarray(row.feeds[s.name]).tobytes() for s in model.feeds if s.axis is None)
        mask = row.feeds.get(MASK)
        ragged = row.width == 1 and model.batching == RAGGED and mask is not None and mask.shape[-1] == row.past + 1
        alike = None if ragged else (row.past, row.width, None if mask is None else mask.shape)
        groups.setdefault((ragged, shared, alike), []).append(sid)
    runs: list[tuple[bool, list[int]]] = []
    for key, sids in groups.items():
        ragged = key[0] is True
        runs += [(ragged, part) for part in _blocks(sids, rows, ragged)]
    return runs


def _blocks(sids: list[int], rows: dict[int, Row], ragged: bool) -> list[list[int]]:
    ordered = sorted(sids, key=lambda s: rows[s].slot)
    if ragged:
        return [ordered]
    blocks: list[list[int]] = []
    for sid in ordered:
        if blocks and rows[blocks[-1][-1]].slot + 1 == rows[sid].slot:
            blocks[-1].append(sid)
        else:
            blocks.append([sid])
    return blocks

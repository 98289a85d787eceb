"""Which steps of a KV pool share one run, from what each step is (its arena row, its tokens, its
cache's length, its mask) and how the model batches (found at load by ``streams/kv/probe.py``):

- one-token steps whose ``attention_mask`` covers past and current positions, of a model that
  batches *ragged*: one run over the block of arena rows they span, whatever their lengths;
- other one-token steps, and fresh prompts of one length where the model takes them together:
  per cache length, width and mask width (and per value of an input the rows of a run share),
  split into runs of consecutive rows (a hole in the block would have another length);
- every other step of several tokens (a prompt over a past): a run of its own, since ONNX Runtime's
  fused attention takes several new tokens over a past at batch 1 only.

A decode batch (``KvPool.decode``: one token per stream, masks left-padded to the widest) is one
run where the model batches ragged rows and the mask covers every row's past; else it is stepped
as its streams' steps (:func:`one_decode_run`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RAGGED", "SINGLE", "UNIFORM", "Step", "one_decode_run", "runs_of"]

RAGGED, UNIFORM, SINGLE = "ragged", "uniform", "single"  # how a model batches one-token steps


@dataclass(frozen=True)
class Step:
    """One stream's step: its arena row, its new tokens, its cache's length, its mask's columns
    (None: no mask) and the bytes of the inputs every row of a run shares."""

    sid: int
    slot: int
    width: int
    past: int
    mask: int | None
    shared: bytes = b""


def runs_of(steps: Sequence[Step], batching: str, prompts_batch: bool) -> list[tuple[bool, list[int]]]:
    """The runs of a pool step: ``(ragged, stream ids)`` each, the ids in slot order.

    Args:
        batching: :data:`RAGGED`, :data:`UNIFORM` or :data:`SINGLE`.
        prompts_batch: fresh prompts of one length run together as each alone.
    """
    groups: dict[tuple, list[Step]] = {}
    for step in steps:
        if batching == SINGLE or (step.width > 1 and (step.past or not prompts_batch)):
            groups[("alone", step.sid)] = [step]
            continue
        ragged = step.width == 1 and batching == RAGGED and step.mask == step.past + 1
        alike = None if ragged else (step.past, step.width, step.mask)
        groups.setdefault((ragged, step.shared, alike), []).append(step)
    runs: list[tuple[bool, list[int]]] = []
    for key, members in groups.items():
        ragged = key[0] is True
        runs += [(ragged, [s.sid for s in block]) for block in _blocks(members, ragged)]
    return runs


def _blocks(steps: list[Step], ragged: bool) -> list[list[Step]]:
    ordered = sorted(steps, key=lambda s: s.slot)
    if ragged:
        return [ordered]
    blocks: list[list[Step]] = []
    for step in ordered:
        if blocks and blocks[-1][-1].slot + 1 == step.slot:
            blocks[-1].append(step)
        else:
            blocks.append([step])
    return blocks


def one_decode_run(batching: str, mask: int | None, widest: int) -> bool:
    """Whether a decode batch (one token a stream, the longest cache ``widest`` positions) runs as one
    run: the model batches ragged rows and its mask (``mask`` columns) covers every row's past."""
    return batching == RAGGED and mask == widest + 1

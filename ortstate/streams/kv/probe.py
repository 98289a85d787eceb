"""How a KV pool may batch a model's streams, found by running it: one-token steps of streams whose
caches hold different lengths in one run (*ragged*), of streams of one length only (*uniform*), or
each stream alone (*single*: the model mixes or pins the rows of its batch).

Each probe prefills three streams alone, then steps them together and each alone from the same
state, and compares every output and fixed-size state (as the recurrent pool checks its rows:
:func:`ortstate.streams.layout.load_pool_model`). A model that derives positions from its cache's
length instead of ``position_ids`` fails the ragged probe; one whose graph pins the batch to 1
fails both.

First, a model with copied KV caches (:mod:`.copied`) must append to them and change nothing
else: one stream's prompt and step are checked for it, and a model that rewrites its past (a
cache trimmed to a window, say) is refused, since the pool keeps only what a step appends.
"""

from __future__ import annotations

import numpy as np

from ...errors import OrtStateError, RunError
from ...scheduler.runs import RAGGED, SINGLE, UNIFORM
from ..stats import Recorder
from .arena import KvArena
from .model import MASK, ROWS, KvModel
from .run import KvRunner, Row, RunResult

__all__ = ["probe_batching", "probe_feeds", "probe_prompts"]
_SEED = 20
_TOLERANCE = 1e-4
_NOISE_FACTOR = 10  # a batch may differ from alone by ten times the kernels' own noise, no more


def probe_feeds(
    model: KvModel, tokens: np.ndarray, past: int, rng: np.random.Generator, mask: str = "full"
) -> dict[str, np.ndarray]:
    """One stream's feeds for ``tokens`` after ``past`` positions, as a generator feeds a decoder
    (``mask``: "full", past and current positions, or "current" only, as the mamba family's)."""
    width = len(tokens)
    feeds: dict[str, np.ndarray] = {}
    for spec in model.feeds:
        if spec.name == "input_ids":
            feeds[spec.name] = tokens[None].astype(spec.dtype)
        elif spec.name == MASK:
            feeds[spec.name] = np.ones((1, (past if mask == "full" else 0) + width), spec.dtype)
        elif spec.name == ROWS:
            feeds[spec.name] = np.zeros(1, spec.dtype)
        elif spec.name in ("position_ids", "cache_position"):
            positions = np.arange(past, past + width, dtype=spec.dtype)
            feeds[spec.name] = (
                positions if spec.rank == 1 else np.broadcast_to(positions, (1,) * (spec.rank - 1) + (width,)).copy()
            )
        elif spec.name == "inputs_embeds":
            feeds[spec.name] = rng.normal(0, 0.5, (1, width, _embed_size(model))).astype(spec.dtype)
        else:  # token_type_ids and the like: zeros
            feeds[spec.name] = np.zeros((1, width), spec.dtype)
    return feeds


def _embed_size(model: KvModel) -> int:
    shape = next(i.shape for i in model.loaded.inputs if i.name == "inputs_embeds")
    size = shape[-1] if shape else None
    if not isinstance(size, int):
        raise OrtStateError(f"{model.loaded.origin}: inputs_embeds has no static hidden size to probe with")
    return size


def _scratch(model: KvModel, slots: int, capacity: int) -> tuple[KvArena, list[np.ndarray], KvRunner]:
    """An arena, fixed states and a runner of the probe's own."""
    arena = KvArena(model.kv, model.kv_shapes, slots, capacity)
    fixed = [np.zeros((slots, *f.shape[1:]), f.carrier) for f in model.fixed]
    return arena, fixed, KvRunner(model, arena, fixed, Recorder())


def probe_prompts(model: KvModel) -> bool:
    """Whether fresh prompts of one length run together as each alone (a batch of empty caches)."""
    rng = np.random.default_rng(_SEED)
    arena, _, runner = _scratch(model, 3, 8)
    try:
        rows = [Row(slot, probe_feeds(model, rng.integers(1, 11, 5), 0, rng), 5, 0) for slot in range(3)]
        alone = [runner.run([row], False) for row in rows]
        together = runner.run(rows, False)
        worst = max(_worst(together, one, row.slot) for row, one in zip(rows, alone))
        copies = runner.run([Row(slot, rows[0].feeds, 5, 0) for slot in range(3)], False)  # the kernels' noise
        return worst <= max(_TOLERANCE, _NOISE_FACTOR * _worst(copies, alone[0], 0))
    except OrtStateError:
        return False
    finally:
        arena.close()


def probe_batching(model: KvModel) -> str:
    """The way ``model`` batches (see the module docstring), found on a scratch arena of its own.

    Raises:
        OrtStateError: the model changes a copied cache's past.
    """
    _check_appends(model)
    if not any(s.axis is None for s in model.feeds) and _agrees(model, [3, 6, 4], True, "full"):
        return RAGGED
    if any(_agrees(model, [4, 4, 4], False, mask) for mask in ("full", "current")):
        return UNIFORM
    return SINGLE


def _check_appends(model: KvModel) -> None:
    if all(var.length_input for var in model.kv):
        return
    rng = np.random.default_rng(_SEED)
    arena, fixed, runner = _scratch(model, 1, 8)
    runner.copied.check_past = True
    try:
        result = runner.run([Row(0, probe_feeds(model, rng.integers(1, 11, 3), 0, rng), 3, 0)], False)
        _commit(arena, fixed, 0, 3, result.fixed[0])
        runner.run([Row(0, probe_feeds(model, rng.integers(1, 11, 1), 3, rng), 1, 3)], False)
    except RunError as exc:
        raise OrtStateError(f"{model.loaded.origin}: cannot pool its streams: {exc}") from None
    finally:
        arena.close()


def _agrees(model: KvModel, prompts: list[int], ragged: bool, mask: str) -> bool:
    """Whether streams prefilled with ``prompts`` tokens step together as each alone."""
    rng = np.random.default_rng(_SEED)
    arena, fixed, runner = _scratch(model, len(prompts), max(prompts) + 2)
    try:
        for slot, length in enumerate(prompts):
            result = runner.run([Row(slot, probe_feeds(model, rng.integers(1, 11, length), 0, rng), length, 0)], False)
            _commit(arena, fixed, slot, length, result.fixed[slot])
        rows = [
            Row(slot, probe_feeds(model, rng.integers(1, 11, 1), length, rng, mask), 1, length)
            for slot, length in enumerate(prompts)
        ]
        alone = [runner.run([row], False) for row in rows]
        together = runner.run(rows, ragged)
        worst = max(_worst(together, one, row.slot) for row, one in zip(rows, alone))
        # the kernels' own noise: the first stream in a batch of copies of itself (no question of
        # lengths or of rows mixing) against alone; int8 activations round differently per batch
        first = rows[0]
        kv, states = arena.values(first.slot), [a[first.slot : first.slot + 1].copy() for a in fixed]
        for slot in range(1, len(prompts)):
            arena.release(slot)
            arena.put(slot, kv)
            _commit(arena, fixed, slot, first.past, states)
        copies = runner.run([Row(slot, first.feeds, 1, first.past) for slot in range(len(prompts))], False)
        noise = _worst(copies, alone[0], first.slot)
    except OrtStateError:  # a run the model refuses: no batching that way (a lone step says why)
        return False
    finally:
        arena.close()
    return worst <= max(_TOLERANCE, _NOISE_FACTOR * noise)


def _commit(arena: KvArena, fixed: list[np.ndarray], slot: int, length: int, states: list[np.ndarray]) -> None:
    arena.lengths[slot] = length
    for array, value in zip(fixed, states):
        array[slot] = value[0]


def _worst(batch: RunResult, one: RunResult, slot: int) -> float:
    """The largest difference of ``slot``'s outputs and states between two runs, relative to the
    values' size (inf where shapes differ)."""
    pairs = [(batch.outputs[slot][n], v) for n, v in one.outputs[slot].items()]
    pairs += list(zip(batch.fixed[slot], one.fixed[slot]))
    worst = 0.0
    for got, want in pairs:
        if got.shape != want.shape:
            return float("inf")
        if want.size:
            scale = 1.0 + float(np.nanmax(np.abs(want)))
            worst = max(worst, float(np.nanmax(np.abs(got.astype(np.float64) - want))) / scale)
    return worst

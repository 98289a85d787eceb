"""The decoding loops: greedy or sampled tokens, and beam search through the model's ``beam_idx``.

Both run the decoder through :meth:`Generator.feed`, which keeps the attention mask and the rows'
prompts; they keep each row's tokens in the generator's :class:`~ortstate.generate.rows.CacheRows`
after every step that ran, so a failing run (a ``RunError``) leaves state and bookkeeping agreeing.

Beam search never copies the cache. The prompt is fed once per prompt (one row each) when every
variable is reordered by ``beam_idx``: the first decode step's ``beam_idx`` then repeats each row for
its beams, as optimum-intel does; a model with variables that are not (cross-attention keys/values
of an encoder-decoder, written once and never reordered) is prefilled with one row per beam. Every
later step feeds, as ``beam_idx``, the row each new beam continues.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .beam_search import BeamSearch
from .logits_process import log_softmax, process, sample
from .options import SearchOptions
from .rows import left_pad
from .stopping import StopCriteria

if TYPE_CHECKING:
    from .generator import GenerationRun, Generator

__all__ = ["beam_search", "sample_or_greedy"]


def sample_or_greedy(
    gen: Generator,
    chunks: Sequence[Sequence[int]],
    fresh: bool,
    histories: list[list[int]],
    max_new_tokens: int,
    options: SearchOptions,
    criteria: StopCriteria,
    run: GenerationRun,
    rng: np.random.Generator | None,
    stream: Callable[[list[int]], Any] | None,
    keep_logits: bool,
) -> None:
    """Feed ``chunks`` (one per row), then pick one token per row per step until every row stopped."""
    gen.check_padding(chunks)
    state, pad, rows = gen.cache_rows, gen.pad_token_id, len(chunks)
    if fresh:
        gen.start_fresh(chunks, np.arange(rows))
    ids, chunk_mask = left_pad(chunks, pad)
    finished = np.zeros(rows, dtype=bool)
    run.stop_reasons = ["max_new_tokens"] * rows
    kept: list[np.ndarray] = []
    for _ in range(max_new_tokens):
        start = time.perf_counter()
        logits = gen.feed(ids, chunk_mask)
        if not chunk_mask.all() and gen.padding_problem():
            state.stale = True  # pad tokens reached a state that takes them in (rows that stopped)
        state.history, state.pending = histories, [[] for _ in range(rows)]
        scores = process(logits, histories, options)
        picked = sample(scores, rng) if rng is not None else np.argmax(scores, axis=-1).astype(np.int64)
        real = ~finished  # rows still generating: their pick is a real token
        picked = np.where(real, picked, pad).astype(np.int64)
        for row in np.flatnonzero(real):
            token = int(picked[row])
            run.tokens[row].append(token)
            histories[row].append(token)
            why = criteria.reason(run.tokens[row])
            if why:
                finished[row] = True
                run.stop_reasons[row] = run.stop_reason = why
        state.pending = [[int(picked[r])] if real[r] else [] for r in range(rows)]
        run.step_seconds.append(time.perf_counter() - start)
        if keep_logits:
            kept.append(np.array(logits, dtype=np.float32))
        if stream is not None:
            stream(picked.tolist())
        if finished.all():
            break
        ids, chunk_mask = picked[:, None], real[:, None].astype(np.int64)
    if not finished.all():
        run.stop_reason = "max_new_tokens"
    run.logits = np.stack(kept) if kept else None


def beam_search(
    gen: Generator,
    chunks: Sequence[Sequence[int]],
    fresh: bool,
    histories: list[list[int]],
    max_new_tokens: int,
    options: SearchOptions,
    criteria: StopCriteria,
    run: GenerationRun,
    rng: np.random.Generator | None,
    stream: Callable[[list[int]], Any] | None,
    keep_logits: bool,
) -> None:
    """``options.num_beams`` beams per prompt; ``run.tokens`` gets each prompt's best hypothesis."""
    gen.check_padding(chunks)
    state, pad, prompts, beams = gen.cache_rows, gen.pad_token_id, len(chunks), options.num_beams
    expand = gen.layout.expands_by_beam_idx
    first = list(chunks) if expand else [c for c in chunks for _ in range(beams)]
    if fresh:
        gen.start_fresh(first, np.arange(prompts) if expand else np.repeat(np.arange(prompts), beams))
    ids, chunk_mask = left_pad(first, pad)
    beam_histories = [list(histories[p]) for p in range(prompts) for _ in range(beams)]
    stops = len(criteria.token_ids)
    search = BeamSearch(
        prompts,
        beams,
        max_new_tokens,
        eos_count=stops,
        length_penalty=options.length_penalty,
        early_stopping=options.early_stopping,
        fill=pad,
        rng=rng,
    )
    keep_at_least = max(2, stops + 1)  # beam sampling keeps a token besides the stop tokens (transformers)
    beam_idx: np.ndarray | None = None
    kept: list[np.ndarray] = []
    for step in range(max_new_tokens):
        start = time.perf_counter()
        logits = gen.feed(ids, chunk_mask, beam_idx)
        if step == 0:
            state.history, state.pending = histories, [[] for _ in histories]
            if expand:
                logits = np.repeat(logits, beams, axis=0)  # every beam of a prompt starts from its row
        scores = process(log_softmax(logits), beam_histories, options, min_tokens_to_keep=keep_at_least)
        chosen = search.step(scores, criteria.hits)
        run.step_seconds.append(time.perf_counter() - start)
        if keep_logits:
            kept.append(np.array(logits, dtype=np.float32))
        if search.done:
            break
        # the next run continues row source[r] with tokens[r]: the model gathers its cache by beam_idx
        beam_idx = chosen.source // beams if (step == 0 and expand) else chosen.source
        beam_histories = [beam_histories[s] + [int(t)] for s, t in zip(chosen.source, chosen.tokens)]
        ids, chunk_mask = chosen.tokens[:, None], np.ones((prompts * beams, 1), dtype=np.int64)
    run.beams = search.hypotheses()
    run.tokens = [list(h[0].tokens) if h else [] for h in run.beams]
    run.stop_reasons = [criteria.reason(tokens) or "max_new_tokens" for tokens in run.tokens]
    run.stop_reason = "max_new_tokens" if "max_new_tokens" in run.stop_reasons else run.stop_reasons[-1]
    run.logits = np.stack(kept) if kept else None
    # the cache holds the beams, not the chosen sequences: the next turn re-feeds the history
    state.history = [h + t for h, t in zip(histories, run.tokens)]
    state.pending = [[] for _ in histories]
    state.stale = True

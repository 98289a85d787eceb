"""The decoding loops: greedy or sampled tokens, and beam search through the model's ``beam_idx``.

Greedy and sampled rows pick their tokens through :func:`~.sampler.choose` (penalties, bias,
``min_tokens``, then the sampling warpers, each row with its own generator), from logits a
``json_schema``'s grammar masked first (:mod:`.structured`: every row's mask in one call; each
row's matcher advanced by its token; a row whose answer is complete stops, reason ``"grammar"``).
``n`` > 1 choices per prompt share one prefill where every variable is reordered by ``beam_idx``
(the first decode step's ``beam_idx`` repeats each prompt's row ``n`` times, as beam search does);
elsewhere each choice's row is prefilled.

Both run the decoder through :meth:`Stepper.feed <ortstate.generate.stepper.Stepper.feed>`, which
keeps the attention mask and the rows' prompts; they keep each row's tokens in the stepper's
:class:`~ortstate.generate.rows.CacheRows` after every step that ran, so a failing run (a
``RunError``) leaves state and bookkeeping agreeing. They fill a :class:`GenerationRun`.

Beam search never copies the cache. The prompt is fed once per prompt (one row each) when every
variable is reordered by ``beam_idx``: the first decode step's ``beam_idx`` then repeats each row for
its beams, as optimum-intel does; a model with variables that are not (cross-attention keys/values
of an encoder-decoder, written once and never reordered) is prefilled with one row per beam. Every
later step feeds, as ``beam_idx``, the row each new beam continues.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .beam_search import BeamSearch, Hypothesis
from .logits_process import log_softmax, process
from .options import SearchOptions
from .rows import left_pad
from .sampler import NO_TOKEN, RowState, choose, no_token, unpickable
from .stepper import Stepper
from .stopping import StopCriteria
from .structured import Matcher, advance, mask_logits

__all__ = ["GenerationRun", "Job", "beam_search", "sample_or_greedy"]


@dataclass
class GenerationRun:
    """What one :meth:`Generator.generate` call did.

    Attributes:
        tokens: the new tokens of each row (a row ends with the token that stopped it, if one did;
            with ``n`` > 1, each prompt's ``n`` choices in a row: prompt ``p``'s choice ``i`` is row
            ``p * n + i``).
        logits: the last-position logits of every step ``[steps, rows, vocab]`` when asked for, else None
            (beam search: ``num_beams`` rows per prompt).
        step_seconds: wall time of every step, feeds and token choice included; step 0 is the prefill.
        encoder_seconds: the encoder run of this call (0 when none ran).
        stop_reason: ``"eos"``, ``"stop_token"``, ``"stop_string"`` or ``"grammar"`` (its
            ``json_schema`` answer complete): what stopped the last row to stop; or
            ``"max_new_tokens"`` (a row ran to the limit).
        stop_reasons: the same for each row.
        seed: the seed sampling used (None when nothing was sampled): pass it back to repeat the run.
        beams: beam search only: each prompt's finished hypotheses, best first (``tokens`` is the best's).
    """

    prompt_tokens: int
    tokens: list[list[int]]
    logits: np.ndarray | None = None
    step_seconds: list[float] = field(default_factory=list)
    encoder_seconds: float = 0.0
    stop_reason: str = "max_new_tokens"
    stop_reasons: list[str] = field(default_factory=list)
    seed: int | None = None
    beams: list[list[Hypothesis]] | None = None

    @property
    def prefill_seconds(self) -> float:
        return self.step_seconds[0] if self.step_seconds else 0.0

    @property
    def decode_seconds(self) -> list[float]:
        """Per-token latencies after the prefill."""
        return self.step_seconds[1:]


@dataclass
class Job:
    """One generation for a loop: what to feed first and how to search.

    Attributes:
        chunks: the tokens to feed first, one list per prompt (left-padded when their lengths differ).
        from_empty: start from the initial state (else continue the stepper's rows).
        histories: each prompt's tokens once ``chunks`` are fed (for the repetition penalty); the
            loops append to them and hand them to the stepper's rows.
        rows: greedy / sampling: each row's picking state (``n`` per prompt), its output the
            run's ``tokens`` of the row.
        expand: ``n`` > 1 rows made from each prompt's prefilled row by the first decode step's
            ``beam_idx`` (else ``chunks`` are fed once per row).
        rng: beam sampling's generator (None: plain beam search, or not beam search).
        stream: called with every step's tokens (one per row).
        pad: the token fed to padded positions and to rows that stopped.
        matchers: each row's place in its ``json_schema`` grammar (empty: no schema).
    """

    chunks: list[list[int]]
    from_empty: bool
    histories: list[list[int]]
    max_new_tokens: int
    options: SearchOptions
    criteria: StopCriteria
    run: GenerationRun
    rows: list[RowState]
    expand: bool
    rng: np.random.Generator | None
    stream: Callable[[list[int]], Any] | None
    keep_logits: bool
    pad: int
    matchers: list[Matcher] = field(default_factory=list)


def sample_or_greedy(stepper: Stepper, job: Job) -> None:
    """Feed ``job.chunks`` (once per prompt, or once per row), then pick a token per row per step
    until every row stopped."""
    run, stream, pad, criteria = job.run, job.stream, job.pad, job.criteria
    n, prompts = job.options.n, len(job.chunks)
    stepper.check_padding(job.chunks)
    state, rows = stepper.rows, prompts * n
    once = n == 1 or job.expand  # one prefill row per prompt
    first = job.chunks if once else [c for c in job.chunks for _ in range(n)]
    if job.from_empty:
        stepper.start(first, np.arange(prompts) if once else np.repeat(np.arange(prompts), n))
    histories = job.histories if n == 1 else [list(h) for h in job.histories for _ in range(n)]
    ids, chunk_mask = left_pad(first, pad)
    beam_idx = None
    finished = np.zeros(rows, dtype=bool)
    run.stop_reasons = ["max_new_tokens"] * rows
    kept: list[np.ndarray] = []
    for step in range(job.max_new_tokens):
        start = time.perf_counter()
        logits = stepper.feed(ids, chunk_mask, beam_idx)
        if not chunk_mask.all() and stepper.padding_problem():
            state.stale = True  # pad tokens reached a state that takes them in (rows that stopped)
        if step == 0 and n > 1 and job.expand:  # the cache holds a row per prompt until the next run
            logits = np.repeat(logits, n, axis=0)
            beam_idx = np.repeat(np.arange(prompts), n)
            state.history, state.pending = job.histories, [[] for _ in job.histories]
        else:
            beam_idx = None
            state.history, state.pending = histories, [[] for _ in range(rows)]
        real = ~finished  # rows still generating: their pick is a real token
        scores = _masked(logits, job, real)
        picked = choose(scores, job.rows)
        failed = np.flatnonzero(real & (picked == NO_TOKEN))
        if failed.size:
            raise no_token(scores, int(failed[0]))
        picked = np.where(real, picked, pad).astype(np.int64)
        if job.matchers:  # a pick the row's budget cannot close is replaced
            picked = np.array(advance([m if r else None for m, r in zip(job.matchers, real)], picked.tolist()))
        for row in np.flatnonzero(real):
            token = int(picked[row])
            run.tokens[row].append(token)
            histories[row].append(token)
            why = criteria.reason(run.tokens[row])
            if not why and job.matchers and job.matchers[row].complete:
                why = "grammar"  # nothing may follow its answer
            if why:
                finished[row] = True
                run.stop_reasons[row] = run.stop_reason = why
        if beam_idx is None:
            state.pending = [[int(picked[r])] if real[r] else [] for r in range(rows)]
        run.step_seconds.append(time.perf_counter() - start)
        if job.keep_logits:
            kept.append(np.array(logits, dtype=np.float32))
        if stream is not None:
            stream(picked.tolist())
        if finished.all():
            break
        ids, chunk_mask = picked[:, None], real[:, None].astype(np.int64)
    if not finished.all():
        run.stop_reason = "max_new_tokens"
    run.logits = np.stack(kept) if kept else None
    if beam_idx is not None:  # ended before the rows were made: continuing re-feeds their histories
        state.history, state.pending, state.stale = histories, [[] for _ in range(rows)], True


def _masked(logits: np.ndarray, job: Job, real: np.ndarray) -> np.ndarray:
    """The logits with each generating row's grammar mask (a copy when the run keeps its logits)."""
    if not job.matchers:
        return logits
    scores = np.array(logits) if job.keep_logits else logits
    mask_logits(scores, [m if r else None for m, r in zip(job.matchers, real)])
    return scores


def beam_search(stepper: Stepper, job: Job) -> None:
    """``options.num_beams`` beams per prompt; ``run.tokens`` gets each prompt's best hypothesis."""
    chunks, histories, options, run, criteria = job.chunks, job.histories, job.options, job.run, job.criteria
    stepper.check_padding(chunks)
    state, prompts, beams = stepper.rows, len(chunks), options.num_beams
    expand = stepper.layout.expands_by_beam_idx
    first = list(chunks) if expand else [c for c in chunks for _ in range(beams)]
    if job.from_empty:
        stepper.start(first, np.arange(prompts) if expand else np.repeat(np.arange(prompts), beams))
    ids, chunk_mask = left_pad(first, job.pad)
    beam_histories = [list(histories[p]) for p in range(prompts) for _ in range(beams)]
    stops = len(criteria.token_ids)
    search = BeamSearch(
        prompts,
        beams,
        job.max_new_tokens,
        eos_count=stops,
        length_penalty=options.length_penalty,
        early_stopping=options.early_stopping,
        fill=job.pad,
        rng=job.rng,
    )
    keep_at_least = max(2, stops + 1)  # beam sampling keeps a token besides the stop tokens (transformers)
    beam_idx: np.ndarray | None = None
    kept: list[np.ndarray] = []
    for step in range(job.max_new_tokens):
        start = time.perf_counter()
        logits = stepper.feed(ids, chunk_mask, beam_idx)
        if step == 0:
            state.history, state.pending = histories, [[] for _ in histories]
            if expand:
                logits = np.repeat(logits, beams, axis=0)  # every beam of a prompt starts from its row
        failed = unpickable(logits, logits.argmax(axis=-1))
        if failed.size:
            raise no_token(logits, int(failed[0]))
        scores = process(log_softmax(logits), beam_histories, options, min_tokens_to_keep=keep_at_least)
        chosen = search.step(scores, criteria.hits)
        run.step_seconds.append(time.perf_counter() - start)
        if job.keep_logits:
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

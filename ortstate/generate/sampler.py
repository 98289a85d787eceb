"""Each row's next token by its own options, every row of a step at once: vLLM's sampler, in numpy.

:func:`choose` takes a step's logits ``[rows, vocab]`` and one :class:`RowState` per row, and
applies, in vLLM's order (``vllm/v1/sample/sampler.py``):

1. the processors that can change greedy's pick: ``min_tokens`` (a row's stop tokens set to
   ``-inf`` while it has fewer new tokens) and ``logit_bias`` (added);
2. the penalties: transformers' ``repetition_penalty`` on every token of the prompt and the output
   (a score above 0 divided by it, one below multiplied), then OpenAI's ``frequency_penalty`` times
   each output token's count and ``presence_penalty`` once per output token, subtracted;
3. a greedy row takes the argmax of those scores (the lowest id among ties);
4. a sampled row: temperature, ``min_p``, ``top_k``, ``top_p`` (ties with the ``top_k``-th best
   kept; ``top_p`` keeps the smallest set of best tokens reaching it, at least one), then one draw
   from the row's own generator (inverse CDF of one uniform).

Temperature is exact for any positive value: a row's scores are shifted by their maximum before
they are divided (in float64), so the best token weighs ``exp(0) = 1`` and every other one
``exp(-gap / T)``, between 0 and 1 whatever ``T``: nothing overflows. As ``T`` vanishes the other
weights underflow to 0 and the row gets greedy's token for every seed (tokens tied for the best
share the draw: the limit of the distribution). ``min_p`` keeps the tokens whose weight is at least
``min_p`` (their probability over the best one's).

The adjusted scores are float64, so that no penalty in range overflows them (a repetition penalty
of 1e-300 multiplies a score by 1e300); one that still overflows is infinite. Infinite scores are
limits, and taken as such: a row whose best score is ``+inf`` picks among its ``+inf`` tokens only
(greedy: the lowest id). A row with no token to pick, a NaN among its logits (a model can emit one:
its numbers overflowed) or every score ``-inf``, gets :data:`NO_TOKEN`; its owner ends it with
:func:`no_token`'s error, never a made-up token.

Each step costs the rows' logits plus their token lists; a greedy row that adjusts nothing is its
logits' argmax (the engine's fast path never calls :func:`choose`: it checks :func:`unpickable`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import GenerationError
from .options import SearchOptions

__all__ = ["NO_TOKEN", "RowState", "adjust", "choose", "no_token", "unpickable", "warp"]

NO_TOKEN = -1  # a row's pick when no token can be picked (see unpickable)


@dataclass
class RowState:
    """What one row's pick depends on besides its logits.

    Attributes:
        options: the row's search options.
        output: its new tokens so far (its owner appends to this list).
        rng: draws its samples (None: greedy).
        prompt: the distinct ids of its prompt (all the tokens before this generation), for the
            repetition penalty (empty when it has none).
        stops: the ids that would stop it, masked while it has fewer than ``min_tokens`` new tokens.
    """

    options: SearchOptions
    output: list[int]
    rng: np.random.Generator | None
    prompt: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bias_ids: np.ndarray = field(init=False)
    bias: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        pairs = self.options.logit_bias
        self.bias_ids = np.array([t for t, _ in pairs], np.int64)
        self.bias = np.array([v for _, v in pairs], np.float64)

    @classmethod
    def start(
        cls,
        options: SearchOptions,
        prompt: Sequence[int],
        stops: Iterable[int],
        rng: np.random.Generator | None,
        output: list[int] | None = None,
    ) -> RowState:
        """A row about to generate after ``prompt``, stopped by ``stops``; ``output`` is its list of
        new tokens if its owner keeps one (else a new one)."""
        seen = np.unique(np.asarray(prompt, np.int64)) if options.repetition_penalty != 1.0 else None
        masked = np.array(sorted(stops), np.int64) if options.min_tokens else None
        row = cls(options, [] if output is None else output, rng)
        if seen is not None:
            row.prompt = seen
        if masked is not None:
            row.stops = masked
        return row


def choose(logits: np.ndarray, rows: Sequence[RowState]) -> np.ndarray:
    """Each row's next token ``[rows]`` (int64) from its logits ``[rows, vocab]`` (see the module docstring)."""
    scores = adjust(logits, rows)
    tokens = np.asarray(scores).argmax(axis=-1).astype(np.int64)
    failed = unpickable(scores, tokens)
    # a failed row still draws, so that every other row's draws stay what they are alone
    sampled = [k for k, r in enumerate(rows) if r.options.do_sample]
    if sampled:
        draws = np.array([rows[k].rng.random() for k in sampled])  # type: ignore[union-attr]
        gone = set(failed.tolist())
        kept = [j for j, k in enumerate(sampled) if k not in gone]
        if kept:
            picked = [sampled[j] for j in kept]
            weights = warp(scores[picked], [rows[k].options for k in picked])
            tokens[picked] = _draw(weights, draws[kept])
    tokens[failed] = NO_TOKEN
    return tokens


def unpickable(scores: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The rows of ``scores`` ``[rows, vocab]`` that have no token to pick, given ``tokens``, their
    argmax: numpy's argmax is a NaN's index when a row holds one, so a row fails exactly when the
    score at its argmax is NaN or ``-inf`` (O(rows), not a pass over the vocabulary)."""
    at = np.asarray(scores)[np.arange(len(tokens)), tokens]
    return np.flatnonzero(~(at > -np.inf))


def no_token(scores: np.ndarray, row: int) -> GenerationError:
    """The error that ends ``row``, one of :func:`unpickable`'s rows of ``scores``."""
    if np.isnan(scores[row]).any():
        return GenerationError("the model's logits hold NaN (its numbers overflowed?): no next token can be picked")
    return GenerationError("every token is ruled out (every score is -inf): no next token can be picked")


def adjust(logits: np.ndarray, rows: Sequence[RowState]) -> np.ndarray:
    """Steps 1 and 2: the scores greedy takes the argmax of (float64; ``logits`` itself when no row
    adjusts anything)."""
    active = [(k, r) for k, r in enumerate(rows) if r.options.adjusts]
    if not active:
        return logits
    out = np.array(logits, dtype=np.float64)
    vocab = out.shape[1]
    masked = [(k, r.stops) for k, r in active if len(r.output) < r.options.min_tokens]
    if masked:
        where, ids = _flat(masked, vocab)
        out[where, ids] = -np.inf
    biased = [(k, r.bias_ids, r.bias) for k, r in active if r.bias.size]
    if biased:
        where, ids, values = _flat(biased, vocab)
        out[where, ids] += values
    repeated = [(k, r) for k, r in active if r.options.repetition_penalty != 1.0]
    if repeated:
        pairs = [(k, np.union1d(r.prompt, np.asarray(r.output, np.int64))) for k, r in repeated]
        where, ids = _flat(pairs, vocab)
        penalty = np.ones(len(rows), np.float64)
        penalty[[k for k, _ in repeated]] = [r.options.repetition_penalty for _, r in repeated]
        values, factor = out[where, ids], penalty[where]
        with np.errstate(over="ignore", under="ignore"):  # past float64's range: infinite, or 0
            out[where, ids] = np.where(values > 0, values / factor, values * factor)
    counted = [(k, r) for k, r in active if r.output and (r.options.presence_penalty or r.options.frequency_penalty)]
    if counted:
        triples = [(k, *np.unique(np.asarray(r.output, np.int64), return_counts=True)) for k, r in counted]
        where, ids, counts = _flat(triples, vocab)
        presence, frequency = np.zeros((2, len(rows)), np.float64)
        presence[[k for k, _ in counted]] = [r.options.presence_penalty for _, r in counted]
        frequency[[k for k, _ in counted]] = [r.options.frequency_penalty for _, r in counted]
        out[where, ids] -= frequency[where] * counts + presence[where]
    return out


def warp(scores: np.ndarray, options: Sequence[SearchOptions]) -> np.ndarray:
    """Step 4 but the draw: each row's weights (float64, the best token's 1, removed ones 0); every
    row has a token to pick (:func:`unpickable`)."""
    x = np.asarray(scores, dtype=np.float64)
    vocab = x.shape[1]
    t = np.array([o.temperature for o in options], np.float64)[:, None]
    top = x.max(axis=1, keepdims=True)
    # a gap over T past float64's range, or a weight below its smallest: the weight is 0, exactly the
    # limit; a best score of +inf (inf - inf is NaN) is the limit too: its +inf tokens share the draw
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        weights = np.exp((x - top) / t)
    infinite = np.isposinf(top[:, 0])
    if infinite.any():
        weights[infinite] = x[infinite] == np.inf
    min_p = np.array([o.min_p for o in options], np.float64)[:, None]
    if min_p.any():
        weights[weights < min_p] = 0.0
    k = np.array([o.top_k if 0 < o.top_k < vocab else vocab for o in options])
    p = np.array([o.top_p for o in options], np.float64)
    narrowed = (k < vocab) | (p < 1.0)
    if narrowed.any():
        weights[narrowed] = _top_k_top_p(weights[narrowed], k[narrowed], p[narrowed])
    return weights


def _top_k_top_p(weights: np.ndarray, k: np.ndarray, p: np.ndarray) -> np.ndarray:
    """vLLM's top-k then top-p on rows of weights: one ascending sort serves both."""
    order = np.argsort(weights, axis=1, kind="stable")
    ranked = np.take_along_axis(weights, order, axis=1)
    kth = ranked[np.arange(len(ranked)), ranked.shape[1] - k]
    ranked = np.where(ranked < kth[:, None], 0.0, ranked)
    cumulative = np.cumsum(ranked, axis=1)
    removed = cumulative <= (1 - p)[:, None] * cumulative[:, -1:]
    removed[:, -1] = False  # the best token stays
    ranked[removed] = 0.0
    out = np.empty_like(weights)
    np.put_along_axis(out, order, ranked, axis=1)
    return out


def _draw(weights: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """The token of each row whose cumulative weight first passes its uniform draw (scaled to the row's total)."""
    cumulative = np.cumsum(weights, axis=1)
    picked = np.argmax(cumulative > (uniforms * cumulative[:, -1])[:, None], axis=1)
    # a draw can land past the last positive weight through rounding: take the last kept token
    kept_last = weights.shape[1] - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
    return np.minimum(picked, kept_last).astype(np.int64)


def _flat(entries: list[tuple], vocab: int) -> tuple[np.ndarray, ...]:
    """``(row, ids, values...)`` entries as flat row indices, ids and values; ids outside the
    vocabulary (a stop id the model cannot make) left out."""
    where = np.concatenate([np.full(len(e[1]), e[0], np.int64) for e in entries])
    columns = [np.concatenate([np.asarray(e[i]) for e in entries]) for i in range(1, len(entries[0]))]
    inside = columns[0] < vocab
    return (where[inside], *(c[inside] for c in columns))

"""transformers' logits processors and warpers, in numpy, applied in transformers' order: beam
search's (greedy decoding and sampling pick through :mod:`.sampler`, vLLM's rules).

``process`` does what transformers' ``LogitsProcessorList`` built by ``GenerationMixin`` does for
the options beam search takes: the repetition penalty first, then, for beam sampling, the warpers
temperature, top-k and top-p, in that order. Each function follows the transformers class of the
same name (``RepetitionPenaltyLogitsProcessor``, ``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
``TopPLogitsWarper``): same thresholds, same ties kept, same tokens removed (their score set to
``-inf``). The penalty and the temperature are applied in float64 and the result cast back to
transformers' float32: any value in range gives its limit (a score past float32's range is
``-inf``, removed), never NaN or a numpy warning.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .options import SearchOptions

__all__ = ["log_softmax", "process", "repetition_penalty", "softmax", "temperature", "top_k", "top_p"]


def repetition_penalty(scores: np.ndarray, sequences: Sequence[Sequence[int]], penalty: float) -> np.ndarray:
    """Every token already in a row's sequence: a score below 0 multiplied by ``penalty``, else divided by it."""
    out = np.array(scores, dtype=np.float32, copy=True)
    for row, tokens in enumerate(sequences):
        if not len(tokens):
            continue
        seen = np.unique(np.asarray(tokens, dtype=np.int64))
        seen = seen[(seen >= 0) & (seen < out.shape[1])]
        values = out[row, seen].astype(np.float64)
        out[row, seen] = _narrow(np.where(values < 0, values * penalty, values / penalty))
    return out


def _narrow(values: np.ndarray) -> np.ndarray:
    """float64 values as float32: past its range, infinite (the limit), without a warning."""
    with np.errstate(over="ignore", under="ignore"):
        return values.astype(np.float32)


def temperature(scores: np.ndarray, value: float) -> np.ndarray:
    return _narrow(np.asarray(scores, dtype=np.float64) / value)


def top_k(scores: np.ndarray, k: int, min_tokens_to_keep: int = 1) -> np.ndarray:
    """Remove every token scoring below the ``k``-th best of its row (ties with it stay)."""
    scores = np.asarray(scores, dtype=np.float32)
    k = min(max(k, min_tokens_to_keep), scores.shape[-1])
    kth = -np.partition(-scores, k - 1, axis=-1)[..., k - 1 : k]
    return np.where(scores < kth, np.float32(-np.inf), scores)


def top_p(scores: np.ndarray, p: float, min_tokens_to_keep: int = 1) -> np.ndarray:
    """Nucleus filtering: sorted ascending, remove the tokens whose cumulative probability is <= 1 - ``p``,
    keeping at least the ``min_tokens_to_keep`` best."""
    scores = np.asarray(scores, dtype=np.float32)
    order = np.argsort(scores, axis=-1, kind="stable")
    ascending = np.take_along_axis(scores, order, axis=-1)
    cumulative = np.cumsum(softmax(ascending), axis=-1)
    remove_sorted = cumulative <= (1 - p)
    remove_sorted[..., -min_tokens_to_keep:] = False
    remove = np.zeros_like(remove_sorted)
    np.put_along_axis(remove, order, remove_sorted, axis=-1)
    return np.where(remove, np.float32(-np.inf), scores)


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row softmax in float64 (a row of all ``-inf`` is not expected: the filters always keep a token)."""
    x = np.asarray(scores, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(scores: np.ndarray) -> np.ndarray:
    """Row log-softmax; a row with ``+inf`` scores gets its limit: those tokens share the whole mass."""
    x = np.asarray(scores, dtype=np.float64)
    infinite = np.isposinf(x.max(axis=-1, keepdims=True))
    if infinite.any():
        x = np.where(infinite, np.where(np.isposinf(x), 0.0, -np.inf), x)
    x = x - x.max(axis=-1, keepdims=True)
    return (x - np.log(np.exp(x).sum(axis=-1, keepdims=True))).astype(np.float32)


def process(
    scores: np.ndarray, sequences: Sequence[Sequence[int]], options: SearchOptions, *, min_tokens_to_keep: int = 1
) -> np.ndarray:
    """The processed scores of one step ``[rows, vocab]``, as transformers' generate() makes them.

    Args:
        sequences: each row's tokens so far (prompt, history and generated), for the repetition penalty.
        min_tokens_to_keep: the warpers keep at least this many tokens (beam sampling keeps one more
            than the eos tokens, as transformers does).
    """
    out = np.asarray(scores, dtype=np.float32)
    if options.repetition_penalty != 1.0:
        out = repetition_penalty(out, sequences, options.repetition_penalty)
    if options.do_sample:
        if options.temperature != 1.0:
            out = temperature(out, options.temperature)
        if options.top_k != 0:
            out = top_k(out, options.top_k, min_tokens_to_keep)
        if options.top_p < 1.0:
            out = top_p(out, options.top_p, min_tokens_to_keep)
    return out

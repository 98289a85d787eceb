"""A picked token with its log-probabilities, for a request that asks for them (OpenAI's ``logprobs``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Scored"]


@dataclass(frozen=True)
class Scored:
    """A picked token with its log-probability, the log-softmax of the model's raw logits (before
    temperature, top-p or penalties, as vLLM's default), and the ``top`` most likely tokens'
    ``(id, logprob)``, most likely first (ties: the lower id first)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]

    @classmethod
    def of(cls, logits: np.ndarray, token: int, top: int) -> Scored:
        x = logits.astype(np.float64).ravel()
        x -= x.max()
        logprobs = x - np.log(np.exp(x).sum())
        ids = np.argpartition(-logprobs, top - 1)[:top] if 0 < top < len(x) else np.arange(len(x))[:top]
        ids = ids[np.lexsort((ids, -logprobs[ids]))]
        return cls(token, float(logprobs[token]), tuple((int(i), float(logprobs[i])) for i in ids))

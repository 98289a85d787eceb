"""Beam search bookkeeping, as transformers' ``GenerationMixin._beam_search`` (the vectorised one, 4.50+).

This module only scores and selects: the caller runs the model, and reorders the model's cache by
feeding each step's :attr:`BeamStep.source` rows as ``beam_idx``. Per prompt it keeps ``num_beams``
running beams and ``num_beams`` finished hypotheses; each step it takes the best
``max(2, 1 + eos tokens) * num_beams`` continuations (or samples them, without replacement, for
beam sampling), files those among the top ``num_beams`` that hit a stopping criterion as finished
(score = summed log-probabilities / ``generated_length ** length_penalty``), and continues the best
``num_beams`` others. It stops as transformers does: every continuation hit a criterion (the length
limit makes them all hit), or no running beam can improve on the finished ones (the
``early_stopping`` heuristic), or, with ``early_stopping=True``, every prompt has ``num_beams``
finished hypotheses. Scores are float32, as transformers keeps them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import GenerationError
from .logits_process import softmax

__all__ = ["BeamSearch", "BeamStep", "Hypothesis"]

_NEG = np.float32(-1.0e9)


@dataclass(frozen=True)
class Hypothesis:
    """A finished beam: its new tokens (the stop token included) and its length-penalised score."""

    tokens: list[int]
    score: float


@dataclass(frozen=True)
class BeamStep:
    """The running beams after one step: row ``r`` of the next run continues row ``source[r]`` of
    this one with token ``tokens[r]`` (rows are ``prompt * num_beams + beam``)."""

    source: np.ndarray
    tokens: np.ndarray


class BeamSearch:
    """Beam search over ``batch`` prompts.

    Args:
        max_new_tokens: the length limit (every continuation hits it at the last step).
        eos_count: how many token ids stop a beam (sets how many continuations are kept).
        rng: draws the continuations when sampling (None: take the best ones).
    """

    def __init__(
        self,
        batch: int,
        num_beams: int,
        max_new_tokens: int,
        *,
        eos_count: int,
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
        fill: int = 0,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.batch, self.num_beams, self.max_new_tokens = batch, num_beams, max_new_tokens
        self.keep = max(2, 1 + eos_count) * num_beams
        self.length_penalty, self.early_stopping, self.rng = length_penalty, early_stopping, rng
        shape = (batch, num_beams)
        self.running = np.full((*shape, max_new_tokens), fill, dtype=np.int64)
        self.running_scores = np.zeros(shape, dtype=np.float32)
        self.running_scores[:, 1:] = _NEG  # only the first beam's tokens count at the first step
        self.sequences = self.running.copy()
        self.lengths = np.zeros(shape, dtype=np.int64)
        self.scores = np.full(shape, _NEG, dtype=np.float32)
        self.finished = np.zeros(shape, dtype=bool)
        self.improvable = np.ones((batch, 1), dtype=bool)
        self.top = np.arange(self.keep) < num_beams
        self.generated = 0
        self.done = False

    def step(self, log_probs: np.ndarray, hits: Callable[[np.ndarray], np.ndarray]) -> BeamStep:
        """Select the next running beams from this step's processed log-probabilities.

        Args:
            log_probs: ``[batch * num_beams, vocab]``, log-softmax then the logits processors.
            hits: given candidate sequences ``[batch, candidates, length]`` (new tokens), whether each
                hit a stopping criterion (its last token stops it, a stop string completed, ...).

        Raises:
            GenerationError: beam sampling has fewer tokens left to draw than it needs.
        """
        b, k, vocab = self.batch, self.num_beams, log_probs.shape[-1]
        acc = log_probs.reshape(b, k, vocab).astype(np.float32) + self.running_scores[:, :, None]
        acc = acc.reshape(b, k * vocab)
        picked = self._pick(acc)
        picked_scores = np.take_along_axis(acc, picked, axis=1)
        beam, token = picked // vocab, picked % vocab
        cur = self.generated
        candidates = np.take_along_axis(self.running, beam[:, :, None], axis=1)
        candidates[:, :, cur] = token
        stops = np.asarray(hits(candidates[:, :, : cur + 1]), dtype=bool)
        if cur + 1 >= self.max_new_tokens:
            stops = np.ones_like(stops)

        # e. the best candidates that did not stop run on
        running_scores = picked_scores + stops.astype(np.float32) * _NEG
        chosen = _topk(running_scores, k)
        self.running = np.take_along_axis(candidates, chosen[:, :, None], axis=1)
        self.running_scores = np.take_along_axis(running_scores, chosen, axis=1)
        source = np.take_along_axis(beam, chosen, axis=1) + (np.arange(b) * k)[:, None]

        # f. finished candidates among the top num_beams join the hypotheses if they score better
        just_finished = stops & self.top[None, :]
        final = picked_scores / np.float32((cur + 1) ** self.length_penalty)
        full = self.finished.all(axis=1, keepdims=True) & (self.early_stopping is True)
        final = final + full.astype(np.float32) * _NEG
        final = final + (~self.improvable).astype(np.float32) * _NEG
        final = final + (~just_finished).astype(np.float32) * _NEG
        merged_scores = np.concatenate([self.scores, final], axis=1)
        best = _topk(merged_scores, k)
        self.sequences = np.take_along_axis(np.concatenate([self.sequences, candidates], axis=1), best[:, :, None], 1)
        self.scores = np.take_along_axis(merged_scores, best, axis=1)
        lengths = np.concatenate([self.lengths, np.full_like(stops, cur + 1, dtype=np.int64)], axis=1)
        self.lengths = np.take_along_axis(lengths, best, axis=1)
        self.finished = np.take_along_axis(np.concatenate([self.finished, just_finished], axis=1), best, axis=1)

        # g. can the search still improve?
        self.generated = cur + 1
        self._update_improvable()
        exists_open = not (self.finished.all() and self.early_stopping is True)
        self.done = not (self.improvable.any() and exists_open and not stops.all())
        return BeamStep(source.reshape(-1), self.running[:, :, cur].reshape(-1))

    def _pick(self, acc: np.ndarray) -> np.ndarray:
        if self.rng is None:
            return _topk(acc, self.keep)
        picked = np.empty((acc.shape[0], self.keep), dtype=np.int64)
        for row, probs in enumerate(softmax(acc)):
            if np.count_nonzero(probs) < self.keep:
                raise GenerationError(
                    f"beam sampling draws {self.keep} continuations per prompt but only "
                    f"{np.count_nonzero(probs)} tokens are left after top_k/top_p: raise top_k or top_p"
                )
            picked[row] = self.rng.choice(probs.size, size=self.keep, replace=False, p=probs)
        return picked

    def _update_improvable(self) -> None:
        if self.early_stopping == "never" and self.length_penalty > 0.0:
            best_length = self.max_new_tokens
        else:
            best_length = self.generated
        best_possible = self.running_scores[:, :1] / np.float32(best_length**self.length_penalty)
        worst = np.where(self.finished, self.scores.min(axis=1, keepdims=True), _NEG)
        self.improvable = self.improvable & np.any(best_possible > worst, axis=-1, keepdims=True)

    def hypotheses(self) -> list[list[Hypothesis]]:
        """Each prompt's finished hypotheses, best first."""
        out = []
        for b in range(self.batch):
            rows = [
                Hypothesis(self.sequences[b, j, : self.lengths[b, j]].tolist(), float(self.scores[b, j]))
                for j in range(self.num_beams)
                if self.finished[b, j]
            ]
            out.append(rows)
        return out


def _topk(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest of each row, largest first (ties: the lower index first)."""
    return np.argsort(-values, axis=1, kind="stable")[:, :k]

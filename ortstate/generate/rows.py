"""What a generator remembers between runs about the rows of its decoder's cache.

The variables hold the cache; this holds what the model cannot say about it: which positions of each
row are real tokens (the attention mask: left padding and pad tokens fed to rows that stopped are
0), which prompt each row belongs to (beam search keeps ``num_beams`` rows per prompt), every row's
tokens (for the repetition penalty, and to re-feed a conversation when the cache cannot continue
it), and the tokens picked but not fed yet (the last token of a generation is fed by the next turn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import GenerationError

__all__ = ["CacheRows", "left_pad"]


def left_pad(chunks: Sequence[Sequence[int]], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Token rows of different lengths as ``[rows, longest]`` ids, padded on the left, and their mask."""
    width = max((len(c) for c in chunks), default=0)
    ids = np.full((len(chunks), width), pad, dtype=np.int64)
    mask = np.zeros((len(chunks), width), dtype=np.int64)
    for row, chunk in enumerate(chunks):
        if len(chunk):
            ids[row, width - len(chunk) :] = chunk
            mask[row, width - len(chunk) :] = 1
    return ids, mask


@dataclass
class CacheRows:
    """The rows of the decoder's cache, as far as the caller must track them.

    Attributes:
        mask: ``[rows, past]``, 1 where the cache holds a real token.
        prompts: for each row, the prompt (context row, e.g. of the encoder output) it belongs to.
        history: each row's real tokens, the fed ones and then the pending ones.
        pending: each row's tokens picked but not fed yet.
        stale: the cache no longer holds the history (after a beam search, or pad tokens fed to a
            model whose state takes them in): continuing re-feeds the history from a fresh state.
    """

    mask: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    prompts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    history: list[list[int]] = field(default_factory=list)
    pending: list[list[int]] = field(default_factory=list)
    stale: bool = False

    @property
    def rows(self) -> int:
        return len(self.history)

    @property
    def past(self) -> int:
        return int(self.mask.shape[1])

    def clear(self) -> None:
        self.mask = np.zeros((0, 0), dtype=np.int64)
        self.prompts = np.zeros(0, dtype=np.int64)
        self.history, self.pending, self.stale = [], [], False

    def drop_pending(self) -> bool:
        """Forget each row's tokens picked but not fed (the next feed does not go on from them);
        whether there were any."""
        if not any(self.pending):
            return False
        self.history = [h[: len(h) - len(p)] for h, p in zip(self.history, self.pending)]
        self.pending = [[] for _ in self.pending]
        return True

    def cut(self, length: int) -> None:
        """One row's cache cut to its first ``length`` positions, real tokens all: nothing pending."""
        self.mask = self.mask[:, :length]
        self.history, self.pending = [self.history[0][:length]], [[]]

    def start(self, chunks: Sequence[Sequence[int]], prompts: np.ndarray) -> None:
        """A fresh cache about to be fed ``chunks`` (one per row)."""
        self.clear()
        self.mask = np.zeros((len(chunks), 0), dtype=np.int64)
        self.prompts = np.asarray(prompts, dtype=np.int64)
        self.history = [list(map(int, c)) for c in chunks]
        self.pending = [[] for _ in chunks]

    def advanced(self, chunk_mask: np.ndarray, beam_idx: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The mask and prompt rows after a run that reorders rows by ``beam_idx`` and feeds ``chunk_mask``
        (not stored: :meth:`commit` does that once the run succeeded)."""
        mask, prompts = self.mask, self.prompts
        if beam_idx is not None:
            mask, prompts = mask[beam_idx], prompts[beam_idx]
        return np.concatenate([mask, np.asarray(chunk_mask, dtype=np.int64)], axis=1), prompts

    def commit(self, mask: np.ndarray, prompts: np.ndarray) -> None:
        self.mask, self.prompts = mask, prompts

    def first_feed(
        self, prompts: list[list[int]], reset: bool, *, rebuild: bool
    ) -> tuple[list[list[int]], bool, list[list[int]]]:
        """What a generation of ``prompts`` feeds first, whether it starts from a fresh state, and each
        row's tokens once it is fed: the prompts (``reset``); or each row's pending token and new prompt
        (continuing); or the whole history and the new prompt when the cache cannot be continued
        (stale, or ``rebuild``).

        Raises:
            GenerationError: continuing with nothing to feed.
        """
        if reset or self.rows == 0:
            return prompts, True, [list(r) for r in prompts]
        histories = [h + r for h, r in zip(self.history, prompts)]
        if self.stale or rebuild:
            return histories, True, [list(h) for h in histories]
        chunks = [p + r for p, r in zip(self.pending, prompts)]
        if not any(chunks):
            raise GenerationError("nothing to continue from: give the next tokens (the last generation fed them all)")
        return chunks, False, histories

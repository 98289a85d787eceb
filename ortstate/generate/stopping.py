"""When a row stops: an eos token, a stop token id, or a stop string completed by its last token.

A stop string stops a row when it occurs in the row's generated text and overlaps the text of the
last token (so ``"stop"`` stops ``["st", "op"]``, ``["las", "topper"]`` and ``["st", "opera"]``,
but a stop string already complete before the last token does not stop it again), which is what
transformers' ``StopStringCriteria`` matches. It is checked on a short window of the last tokens
decoded with the special tokens kept (a stop string may be one, e.g. ``"<|im_end|>"``), long
enough to hold the stop string even when every character is split over four byte tokens: the
check costs the same at the thousandth token as at the first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["StopCriteria"]


class StopCriteria:
    """Decides, from a row's generated tokens, whether (and why) it stops.

    Args:
        eos_token_ids: the model's end-of-sequence tokens (reason ``"eos"``).
        stop_token_ids: more tokens that stop a row (reason ``"stop_token"``).
        stop_strings: texts that stop a row (reason ``"stop_string"``; needs ``tokenizer``).
        tokenizer: anything with ``decode(ids, skip_special_tokens=...)``.
        min_tokens: no row stops before it has more tokens than this (vLLM's ``min_tokens``: the stop
            tokens are masked meanwhile, see :mod:`.sampler`; stop strings are not looked for).
    """

    def __init__(
        self,
        eos_token_ids: Iterable[int] = (),
        stop_token_ids: Iterable[int] = (),
        stop_strings: Sequence[str] = (),
        tokenizer: Any = None,
        min_tokens: int = 0,
    ) -> None:
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self.stop_ids = frozenset(int(t) for t in stop_token_ids) - self.eos
        self.strings = tuple(stop_strings)
        if self.strings and tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        self.tokenizer = tokenizer
        self.window = 4 * max((len(s) for s in self.strings), default=0) + 2
        self.min_tokens = min_tokens

    @property
    def token_ids(self) -> frozenset[int]:
        """Every token id that stops a row."""
        return self.eos | self.stop_ids

    def reason(self, tokens: Sequence[int]) -> str | None:
        """Why a row whose generated tokens are ``tokens`` stops now, or None."""
        if len(tokens) <= self.min_tokens:
            return None
        last = int(tokens[-1])
        if last in self.eos:
            return "eos"
        if last in self.stop_ids:
            return "stop_token"
        if self.strings and self._string_completed(tokens):
            return "stop_string"
        return None

    def hits(self, candidates: np.ndarray) -> np.ndarray:
        """:meth:`reason` is not None, for every sequence of ``candidates`` ``[..., length]``."""
        flat = candidates.reshape(-1, candidates.shape[-1])
        out = np.isin(flat[:, -1], list(self.token_ids)) if self.token_ids else np.zeros(len(flat), dtype=bool)
        if self.strings:
            out |= np.array([self._string_completed(row.tolist()) for row in flat], dtype=bool)
        return out.reshape(candidates.shape[:-1])

    def _string_completed(self, tokens: Sequence[int]) -> bool:
        window = [int(t) for t in tokens[-self.window :]]
        before = self.tokenizer.decode(window[:-1], skip_special_tokens=False)
        now = self.tokenizer.decode(window, skip_special_tokens=False)
        common = 0
        for a, b in zip(before, now):
            if a != b:
                break
            common += 1
        return any(s in now[max(0, common - len(s) + 1) :] for s in self.strings)

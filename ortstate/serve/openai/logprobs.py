"""The ``logprobs`` of OpenAI's answers, made from the batcher's scored tokens
(:class:`~ortstate.generate.scored.Scored`: the log-softmax of the model's raw logits, before
temperature, top-p or penalties, as vLLM's default; the top tokens most likely first).

- ``/v1/chat/completions`` (``logprobs: true``, ``top_logprobs: N``): ``{"content": [{"token",
  "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}, ...], "refusal": null}``.
- ``/v1/completions`` (``logprobs: N``): ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``,
  each ``top_logprobs`` entry a dict of the N most likely tokens' text to logprob, with the picked
  token's added when it is not among them (up to N + 1 entries, as OpenAI's).

A token's text is its id decoded alone (special tokens kept); ``bytes`` are that text's UTF-8 (a
token that is part of a character decodes to U+FFFD). One entry per generated token, in streamed
chunks the tokens of the chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...generate import Tokenizer
from ...generate.scored import Scored

__all__ = ["LogprobsShaper"]


class LogprobsShaper:
    """Shapes one answer's scored tokens, chunk after chunk (``text_offset`` runs on across them)."""

    def __init__(self, tokenizer: Tokenizer, chat: bool) -> None:
        self.tokenizer, self.chat = tokenizer, chat
        self.offset = 0
        self._texts: dict[int, str] = {}

    def shape(self, scored: Sequence[Scored]) -> dict[str, Any]:
        if self.chat:
            return {"content": [self._entry(s.token, s.logprob, s.top) for s in scored], "refusal": None}
        texts = [self._text(s.token) for s in scored]
        offsets = []
        for text in texts:
            offsets.append(self.offset)
            self.offset += len(text)
        tops = []
        for s in scored:
            top = {self._text(i): lp for i, lp in s.top}
            top.setdefault(self._text(s.token), s.logprob)
            tops.append(top)
        return {
            "tokens": texts,
            "token_logprobs": [s.logprob for s in scored],
            "top_logprobs": tops,
            "text_offset": offsets,
        }

    def _entry(self, token: int, logprob: float, top: Sequence[tuple[int, float]] | None) -> dict[str, Any]:
        text = self._text(token)
        entry: dict[str, Any] = {"token": text, "logprob": logprob, "bytes": list(text.encode())}
        if top is not None:
            entry["top_logprobs"] = [self._entry(i, lp, None) for i, lp in top]
        return entry

    def _text(self, token: int) -> str:
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self.tokenizer.decode([token], skip_special_tokens=False)
        return text

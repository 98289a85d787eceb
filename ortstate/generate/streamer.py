"""Text out of a token stream, decoded incrementally: each token costs a decode of a few tokens, not of
the whole text so far.

A tokenizer's text for a token depends on its neighbours (SentencePiece drops the space of the first
piece; byte-level BPE splits one character over several tokens, which decode alone to U+FFFD), so a
token's text is the difference between decoding a short window ending with it and the same window
without it. The window starts a token before the last text emitted (its left context) and grows only
while the text is held back: while it ends in U+FFFD (a character still incomplete, the way
transformers' ``TextStreamer`` holds back an unfinished word) or is not yet longer than before. The
algorithm is the one of Hugging Face's text-generation-inference (``prefix_offset``/``read_offset``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["IncrementalDecoder", "TextStreamer", "TokenDecoder"]

REPLACEMENT = "\ufffd"


class TokenDecoder(Protocol):
    """What a tokenizer must offer: ``tokenizers.Tokenizer`` and transformers' tokenizers both do."""

    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDecoder:
    """Turns tokens, one at a time, into the text they add.

    Args:
        tokenizer: anything with ``decode(ids, skip_special_tokens=...)``.
        skip_special_tokens: leave special tokens (eos, chat markers) out of the text.
    """

    def __init__(self, tokenizer: TokenDecoder, *, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.tokens: list[int] = []
        self._prefix = 0  # the window's start: one token of left context before the unread ones
        self._read = 0  # tokens before this one have been emitted

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens))

    def push(self, token: int) -> str:
        """Add ``token``; the text that is now final ("" while held back)."""
        self.tokens.append(int(token))
        before = self._decode(self.tokens[self._prefix : self._read])
        now = self._decode(self.tokens[self._prefix :])
        if len(now) > len(before) and not now.endswith(REPLACEMENT):
            self._prefix, self._read = self._read, len(self.tokens)
            return now[len(before) :]
        return ""

    def flush(self) -> str:
        """The text still held back (an incomplete character stays as U+FFFD); the decoder is then empty."""
        before = self._decode(self.tokens[self._prefix : self._read])
        now = self._decode(self.tokens[self._prefix :])
        self.tokens, self._prefix, self._read = [], 0, 0
        return now[len(before) :]


class TextStreamer:
    """A ``stream=`` callback for :meth:`~ortstate.generate.Generator.generate` that emits text.

    Called with each new token; calls ``on_text`` with each piece of text as soon as it is final, and
    with what is left when the generation ends (``generate`` calls :meth:`end`). The pieces
    concatenated are the decoded text of all the tokens.

    Args:
        tokenizer: anything with ``decode(ids, skip_special_tokens=...)``.
        on_text: receives the text pieces (default: written to stdout and flushed).
        skip_special_tokens: leave special tokens out (default True).
    """

    def __init__(
        self,
        tokenizer: TokenDecoder | Any,
        on_text: Callable[[str], None] | None = None,
        *,
        skip_special_tokens: bool = True,
    ) -> None:
        self.decoder = IncrementalDecoder(tokenizer, skip_special_tokens=skip_special_tokens)
        self.on_text = on_text or _write_stdout

    def __call__(self, token: int) -> None:
        text = self.decoder.push(token)
        if text:
            self.on_text(text)

    def end(self) -> None:
        """Emit what is held back and start over (the next generation streams from an empty text)."""
        text = self.decoder.flush()
        if text:
            self.on_text(text)


def _write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()

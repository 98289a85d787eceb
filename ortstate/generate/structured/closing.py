"""Finishing every answer within its token budget: a way to close it from where it is (a plan), kept
for each row, so that a row whose budget runs out closes its JSON instead of being cut.

A plan is found greedily on a copy of the row's matcher: the text the grammar forces (llguidance's
forced bytes, in the tokenizer's tokens), else the first byte of :data:`PREFERRED` the grammar
allows, one single-byte token at a time, until the answer is whole. Closing a string comes first,
then closing objects and arrays, then the shortest values (``0``, ``""``): what a JSON answer needs
to end. A plan is a way to finish, not always the shortest; it is searched at most ``limit`` tokens
deep.

A row keeps its plan while the tokens it picks follow it, or leave it still a way to finish (inside a
string, any string token: the plan is the same closing quote and brackets); only a pick that
invalidates it costs a new search, of about a microsecond a byte.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .vocab import TokenBytes

__all__ = ["PREFERRED", "Closer"]

# the bytes a plan tries, in order: close a string, an object, an array; the shortest values; then the rest
PREFERRED = b'"}]0,:1-.tfn[{ ' + bytes(c for c in range(33, 127) if chr(c) not in '"}]0,:1-.tfn[{')


class Closer:
    """Plans for one vocabulary.

    Args:
        vocab: each id's bytes.
        encode: bytes -> ids that spell them (for the text a grammar forces).
    """

    def __init__(self, vocab: TokenBytes, encode: Callable[[bytes], list[int]]) -> None:
        single = {b: i for i, b in reversed(list(enumerate(vocab.tokens))) if len(b) == 1 and i not in vocab.special}
        self.preferred = [single[bytes([c])] for c in PREFERRED if bytes([c]) in single]
        self.encode = encode

    def plan(self, inner: Any, limit: int) -> list[int] | None:
        """Tokens that make the answer whole from ``inner``'s state (not changed), or None if none is
        found within ``limit`` tokens."""
        copy = inner.deep_copy()
        out: list[int] = []
        while not copy.is_accepting():
            if len(out) >= limit:
                return None
            forced = copy.compute_ff_bytes()
            ids = self.encode(forced) if forced else []
            if ids and copy.try_consume_tokens(ids) == len(ids):
                out += ids
                continue
            for token in self.preferred:
                if copy.try_consume_tokens([token]) == 1:
                    out.append(token)
                    break
            else:
                return None
        return out if len(out) <= limit else None

    @staticmethod
    def still_closes(inner: Any, plan: Sequence[int]) -> bool:
        """``plan`` makes the answer whole from ``inner``'s state too (checked on a copy)."""
        copy = inner.deep_copy()
        return copy.try_consume_tokens(list(plan)) == len(plan) and bool(copy.is_accepting())

"""Finishing every answer within its token budget: a way to close it from where it is (a plan), kept
for each row, so that a row whose budget runs out closes its JSON instead of being cut.

A plan is found greedily on a copy of the row's matcher: the text the grammar forces (llguidance's
forced bytes, in the tokenizer's tokens), else the first byte the grammar allows of
:data:`IN_STRING` (inside a JSON string: its closing quote first) or :data:`OUTSIDE` (closing
objects and arrays first, then the shortest values, ``0`` and ``""``), one single-byte token at a
time, until the answer is whole. Whether the text is inside a string is read from its bytes (a
:data:`Lex` state kept for each row). A plan is a way to finish, not always the shortest; it is
searched at most ``limit`` tokens deep, and a byte taken :data:`RUN` times in a row is tried last.

A string the schema keeps open (``"pattern": "[A-Z]{3}"`` before three capitals, a ``format``, a
``minLength``) is closed by looking ahead, once every :data:`LOOKAHEAD_EVERY` bytes: a byte after
which the quote may come, else up to :data:`LOOKAHEAD` bytes from the schema's own patterns
(:func:`~.schema.pattern_bytes`); between, the string takes bytes drawn from those it allows (from a
fixed seed: the same place gives the same plan), which walks through an email's or a date's format.

A row keeps its plan while the tokens it picks follow it, or leave it still a way to finish (inside a
string, any string token: the plan is the same closing quote and brackets); only a pick that
invalidates it costs a new search, of about a microsecond a byte.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import Any

from ...errors import GenerationError
from .text import one_line
from .vocab import TokenBytes

__all__ = ["IN_STRING", "OUTSIDE", "START", "Closer", "Lex", "lex"]


def _order(first: bytes, skip: bytes = b"") -> bytes:
    return first + bytes(c for c in range(32, 127) if c not in first and c not in skip)


# the bytes a plan tries, in order: inside a string, its end (never an escape); outside, the ends of
# objects and arrays, then the shortest values
IN_STRING = _order(b'"', skip=b"\\")
OUTSIDE = _order(b'}],0"-.1:tfn[{')
RUN = 4  # a byte picked this many times in a row is tried last (a pattern such as a+b closes on b)
LOOKAHEAD = 3
LOOKAHEAD_EVERY = 8
Lex = tuple[bool, bool]  # (inside a JSON string, just after its backslash)
START: Lex = (False, False)


def lex(state: Lex, data: bytes) -> Lex:
    """The string state after ``data``: JSON's quotes and backslash escapes."""
    inside, escaped = state
    for byte in data:
        if escaped:
            escaped = False
        elif inside and byte == 0x5C:
            escaped = True
        elif byte == 0x22:
            inside = not inside
    return inside, escaped


class Closer:
    """Plans for one vocabulary.

    Args:
        vocab: each id's bytes.
        encode: bytes -> ids that spell them (for the text a grammar forces).
    """

    def __init__(self, vocab: TokenBytes, encode: Callable[[bytes], list[int]]) -> None:
        self.single = {
            b: i for i, b in reversed(list(enumerate(vocab.tokens))) if len(b) == 1 and i not in vocab.special
        }
        self.outside = self.ids(OUTSIDE)
        self.inside = self.ids(IN_STRING)
        self.tokens = vocab.tokens
        self.encode = encode

    def ids(self, data: bytes) -> list[int]:
        """The single-byte tokens of ``data``'s bytes that the vocabulary has, in order."""
        return [self.single[bytes([c])] for c in data if bytes([c]) in self.single]

    def plan(self, inner: Any, limit: int, state: Lex = START, hints: Sequence[int] = ()) -> list[int] | None:
        """Tokens that make the answer whole from ``inner``'s state (not changed) and string state
        ``state``, or None if none is found within ``limit`` tokens; ``hints``: the single-byte
        tokens of the schema's patterns (:func:`~.schema.pattern_bytes`).

        Raises:
            GenerationError: the engine passed one of its limits on the way (naming ``json_schema``).
        """
        copy = inner.deep_copy()
        out: list[int] = []
        looked = -LOOKAHEAD_EVERY
        draw = random.Random(0)  # the same plan from the same place
        while not copy.is_accepting():
            if len(out) >= limit:
                return None
            forced = copy.compute_ff_bytes()
            ids = self.encode(forced) if forced else []
            if ids and copy.try_consume_tokens(ids) == len(ids):
                out += ids
                state = lex(state, forced)
                continue
            if state == (True, False) and self.inside and len(out) - looked >= LOOKAHEAD_EVERY:
                ahead = self._to_quote(copy, hints)
                looked = len(out)
                if ahead:
                    out += ahead
                    state = lex(state, b"".join(self.tokens[t] for t in ahead))
                    continue
            if state[0]:  # a byte the string takes, drawn: a format (an email, a date) is found by walking
                order = [*draw.sample(self.inside, len(self.inside))]
            else:
                order = self.outside
                if len(out) >= RUN and len(set(out[-RUN:])) == 1:  # going round: try the others first
                    order = [t for t in order if t != out[-1]] + [out[-1]]
            token = next((t for t in order if copy.try_consume_tokens([t]) == 1), None)
            if token is None:
                if copy.is_error():  # a limit of the engine's passed on the way
                    raise GenerationError(f"json_schema: {one_line(copy.get_error())}", field="json_schema")
                return None
            out.append(token)
            state = lex(state, self.tokens[token])
        return out if len(out) <= limit else None

    def _to_quote(self, copy: Any, hints: Sequence[int]) -> list[int] | None:
        """Bytes after which the open string may end (taken on ``copy``): the quote itself, a byte
        then the quote, or up to :data:`LOOKAHEAD` of ``hints`` then the quote; None if none is."""
        quote = self.inside[0]
        if copy.try_consume_tokens([quote]) == 1:
            return [quote]
        sequences = itertools.chain(
            ([t] for t in self.inside[1:]), *(itertools.product(hints, repeat=n) for n in range(2, LOOKAHEAD + 1))
        )
        for seq in sequences:
            taken = copy.try_consume_tokens(list(seq))
            if taken == len(seq) and copy.try_consume_tokens([quote]) == 1:
                copy.rollback(1)
                return list(seq)
            if taken:
                copy.rollback(taken)
        return None

    @staticmethod
    def still_closes(inner: Any, plan: Sequence[int]) -> bool:
        """``plan`` makes the answer whole from ``inner``'s state too (checked on a copy)."""
        copy = inner.deep_copy()
        return copy.try_consume_tokens(list(plan)) == len(plan) and bool(copy.is_accepting())

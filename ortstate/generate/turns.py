"""A conversation's next turn as the tokens its cache holds, then only the new ones.

A chat template renders the whole conversation every turn, and tokenizing that afresh seldom gives
the tokens the cache holds: a reply's tokens as generated are not in general the ones its text
tokenizes to (nor are special tokens a reply held, which its text leaves out). So a turn whose
text starts with the last turn's text (its prompt's and its reply's, as the template wrote them)
is taken as the last turn's tokens (:func:`turn_ids`) and then the tokens of the text that follows
(:func:`continued_ids`): the cache holds all but the last of those already. A turn whose text
does not start so (a template that rewrites earlier turns, e.g. drops a reply's thinking) is
tokenized whole, and fed from an empty cache.

:class:`~ortstate.generate.Chat` and ``ortstate serve``'s conversations follow this one rule.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

__all__ = ["continued_at", "continued_ids", "turn_ids"]


class _Encodes(Protocol):
    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...


def continued_at(last_text: str | None, text: str) -> int | None:
    """Where ``text`` (a turn's whole prompt) goes on past the last turn's text: its length; None
    when ``text`` does not start with ``last_text`` and go on past it (or there was no last turn's text)."""
    if not last_text or len(text) <= len(last_text) or not text.startswith(last_text):
        return None
    return len(last_text)


def continued_ids(last_text: str | None, last_ids: Sequence[int], text: str, tokenizer: _Encodes) -> list[int] | None:
    """``text`` (a turn's whole prompt) as the tokens continuing the last turn: ``last_ids``, then
    the tokens of what follows ``last_text`` in it (no special tokens added); None where
    :func:`continued_at` is."""
    at = continued_at(last_text, text)
    return None if at is None else [*last_ids, *tokenizer.encode(text[at:], add_special_tokens=False)]


def turn_ids(prompt: Sequence[int], reply: Sequence[int], eos_token_ids: Collection[int]) -> list[int]:
    """The tokens a turn leaves for the next: its prompt's and its reply's as generated, an eos
    token that ended the reply left out (a chat template writes its own after the reply)."""
    ended = bool(reply) and reply[-1] in eos_token_ids
    return [*prompt, *(reply[:-1] if ended else reply)]

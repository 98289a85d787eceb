"""A row's place in its grammar, every row's mask at once, and the matchers moved by the picked tokens.

- :func:`mask_logits` writes every constrained row's mask into a step's logits ``[rows, vocab]``
  (``-inf`` where the grammar forbids a token): one call computes every row's bitmask (llguidance's
  thread pool, the GIL released), numpy expands and applies them; no Python loop over the vocabulary.
- :func:`advance` moves each row's matcher by its picked token; a row whose
  :attr:`Matcher.complete` is then true must stop (its answer is whole and nothing may follow).

A row's stop tokens (eos, ``stop_token_ids``) are not the grammar's to write: the mask allows them
exactly where the row's answer may end (:attr:`Matcher.accepting`), and they are never fed to the
matcher. llguidance's own end token is an id past the logits that no row can pick.

**The budget.** A row with a budget (its ``max_new_tokens``) keeps a plan: tokens that would make its
answer whole from where it is (:mod:`.closing`). When the budget left is no more than the plan, the
mask allows only the plan's next token (the answer closes); a pick that would leave a plan longer
than the budget after it (a token opening more than the budget can close) is replaced by the
plan's next token (by a stop token where the answer was already whole). So every answer is whole
when its budget ends, whatever the weights.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import GenerationError
from .closing import START, Closer, lex
from .text import one_line

__all__ = ["Matcher", "advance", "mask_logits"]

_NEG = np.float32(-np.inf)


class Matcher:
    """One row's place in its grammar.

    Args:
        inner: its llguidance matcher (a copy of the compiled schema's).
        stops: the ids that end the row (allowed only where its answer may end).
        width: the logits it masks.
        closer: finds plans (None with no budget).
        budget: the tokens the row may still pick (None: no bound kept).
        plan: a plan from ``inner``'s state, if one is known (else searched for when needed).
        hints: the schema's patterns' characters, as single-byte tokens (what plans try in strings).
    """

    def __init__(
        self,
        inner: Any,
        stops: np.ndarray,
        width: int,
        closer: Closer | None = None,
        budget: int | None = None,
        plan: list[int] | None = None,
        hints: Sequence[int] = (),
    ) -> None:
        self.inner = inner
        self.stops = stops
        self.width = width
        self.closer = closer
        self.budget = budget
        self.plan = plan
        self.searched = plan is not None  # ``plan`` is the search's answer for this state (None: none found)
        self.state = START  # inside a JSON string or not (what a plan closes first)
        self.hints = hints

    @property
    def accepting(self) -> bool:
        """The text so far is a whole answer: the row may stop here."""
        return bool(self.inner.is_accepting())

    @property
    def complete(self) -> bool:
        """The answer is whole and the row must stop: nothing may follow it, or its budget is spent."""
        if self.inner.is_error():
            return False
        return bool(self.inner.is_stopped()) or (self.budget == 0 and self.accepting)

    def check(self) -> None:
        """Raise GenerationError if the engine gave up on this row (a limit passed)."""
        if self.inner.is_error():
            raise GenerationError(f"json_schema: {one_line(self.inner.get_error())}", field="json_schema")

    def forced(self) -> int | None:
        """The plan's next token when the budget left allows nothing else, else None."""
        if self.closer is None or self.budget is None:
            return None
        if not self.searched:
            self.plan, self.searched = self.closer.plan(self.inner, self.budget, self.state, self.hints), True
        return self.plan[0] if self.plan and len(self.plan) >= self.budget else None

    def take(self, token: int) -> int:
        """Move by ``token`` (not a stop token); the token the row takes (see the module docstring).

        Raises:
            GenerationError: the matcher refused it (it was not allowed by the mask).
        """
        before, state = self.plan, self.state
        self._consume(token)
        if self.closer is None or self.budget is None:
            return token
        tokens = self.closer.tokens
        self.budget -= 1
        self.state = lex(state, tokens[token])
        if before and token == before[0]:
            self.plan = before[1:]
        elif before and self.closer.still_closes(self.inner, before):
            self.plan = before
        else:
            self.plan = self.closer.plan(self.inner, self.budget, self.state, self.hints)
        self.searched = True
        if self.plan is not None and len(self.plan) <= self.budget:
            return token
        if before:  # the pick opened more than the budget can close: take the plan's next token
            self.inner.rollback(1)
            self._consume(before[0])
            self.plan, self.state = before[1:], lex(state, tokens[before[0]])
            return before[0]
        if before is not None and self.stops.size:  # the answer was whole: end it
            self.inner.rollback(1)
            self.budget, self.plan, self.state = self.budget + 1, [], state
            return int(self.stops[0])
        return token  # no plan was known: nothing better to pick

    def _consume(self, token: int) -> None:
        if not self.inner.consume_token(int(token)):
            raise GenerationError(f"json_schema: {one_line(self.inner.get_error())}", field="json_schema")


_EXECUTOR: list[Any] = []  # llguidance's thread pool, made on first use
_LOCK = threading.Lock()


def _executor(llg: Any) -> Any:
    with _LOCK:
        if not _EXECUTOR:
            _EXECUTOR.append(llg.LLExecutor())
        return _EXECUTOR[0]


def mask_logits(logits: np.ndarray, matchers: Sequence[Matcher | None]) -> None:
    """Set to ``-inf``, in place, every logit a row's grammar forbids next (rows whose matcher is None
    are left as they are); each row's stop tokens are allowed exactly where its answer may end, a
    row out of budget is allowed its plan's next token only.

    Raises:
        GenerationError: a row's engine passed a limit, or no token of the vocabulary may follow.
    """
    import llguidance.numpy

    rows = [r for r, m in enumerate(matchers) if m is not None]
    if not rows:
        return
    chosen = [m for m in matchers if m is not None]
    width = logits.shape[1]
    if any(m.width != width for m in chosen):
        raise GenerationError(
            f"json_schema: the logits have {width} ids, the grammar's vocabulary {chosen[0].width}", field="json_schema"
        )
    bits = np.empty((len(rows), (width + 1 + 31) // 32), np.int32)  # + llguidance's end token, past the logits
    llguidance.numpy.fill_next_token_bitmask_par(
        _executor(llguidance), [(m.inner, k) for k, m in enumerate(chosen)], bits
    )
    allowed = np.unpackbits(bits.view(np.uint8), axis=1, count=width, bitorder="little").view(bool)
    for k, m in enumerate(chosen):
        m.check()
        if m.stops.size:
            allowed[k, m.stops] = m.accepting
        forced = m.forced()
        if forced is not None:
            allowed[k] = False
            allowed[k, forced] = True
    empty = ~allowed.any(axis=1)
    if empty.any():
        raise GenerationError(
            "json_schema: no token of the vocabulary can write what the schema requires next "
            f"(row {rows[int(np.argmax(empty))]})",
            field="json_schema",
        )
    if len(rows) == logits.shape[0]:
        np.copyto(logits, _NEG, where=~allowed)
    else:
        picked = logits[rows]
        np.copyto(picked, _NEG, where=~allowed)
        logits[rows] = picked


def advance(matchers: Sequence[Matcher | None], tokens: Sequence[int]) -> list[int]:
    """Move each row's matcher by its picked token; the tokens the rows take (a pick the budget cannot
    close is replaced: see the module docstring). Stop tokens are not the grammar's: kept as picked.

    Raises:
        GenerationError: a matcher refused its token (it was not allowed by its mask).
    """
    taken = [int(t) for t in tokens]
    for k, (matcher, token) in enumerate(zip(matchers, taken)):
        if matcher is not None and token not in matcher.stops:
            taken[k] = matcher.take(token)
    return taken

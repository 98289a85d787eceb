"""A :class:`~ortstate.generate.Generator`'s state reused by the next ``generate()`` (automatic
prefix caching for one stream): a prompt that starts with what the state holds (the last call's
prompt and answer) feeds only the rest; one that parts from it earlier cuts the state there, where
every variable is an attention cache (a position a token: the first positions are what the first
tokens alone make), and starts afresh otherwise. A whole prompt held still feeds its last token
(its logits), as vLLM recomputes it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .prompts import check_prompts
from .stepper import Stepper

if TYPE_CHECKING:
    from .generator import Generator

__all__ = ["reuse", "reused"]


def reused(generator: Generator, prompt: Sequence[int], plan: Callable[[], Any]) -> tuple[Sequence[int], bool]:
    """What ``generator.generate(prompt)`` feeds and whether it starts afresh: the prompt's tokens
    its state does not hold, continuing it (``generator.cached_tokens`` set), where the state allows
    (:func:`reuse`); ``plan()`` checks the request as a fresh one first (one refused leaves the state
    as it was)."""
    stepper = generator.stepper
    if stepper.rows.rows != 1 or stepper.context:
        return prompt, True
    (ids,) = check_prompts([prompt], 1, vocab_size=generator.vocab_size)  # (refused here as there)
    kept = None if plan().options.beam_search else reuse(stepper, ids)
    if kept is None:
        return prompt, True
    generator.cached_tokens = kept[1]
    return kept[0], False


def reuse(stepper: Stepper, prompt: Sequence[int]) -> tuple[list[int], int] | None:
    """What to feed after the state ``stepper`` keeps for a generation of ``prompt`` (its tokens not
    held: after the pending token, when the prompt goes on with it) and how many of the prompt's
    tokens the state holds; None: start from a fresh state. The state is cut here if need be: the
    caller has checked the request (a request refused leaves the state as it was)."""
    rows = stepper.rows
    if rows.rows != 1 or rows.stale or stepper.context or not rows.mask.all():
        return None  # several rows, a beam search's, padding, an encoder's output: afresh
    held, pending = rows.history[0], rows.pending[0]
    fed = len(held) - len(pending)
    common = _common(prompt, held)
    if common == len(held) and (len(prompt) > common or pending):
        return list(prompt[common:]), fed  # it goes on from all the state holds
    keep = min(common, fed, len(prompt) - 1)
    if keep <= 0 or (keep < fed and stepper.layout.cut_problem() is not None):
        return None
    if keep < fed:
        stepper.cut(keep)
    else:
        rows.drop_pending()
    return list(prompt[keep:]), keep


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """How many first tokens ``a`` and ``b`` share."""
    count = min(len(a), len(b))
    return next((k for k in range(count) if a[k] != b[k]), count)

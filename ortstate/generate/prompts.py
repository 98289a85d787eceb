"""Checking what a caller hands :meth:`~ortstate.generate.Generator.generate`: prompts and lengths."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import GenerationError

__all__ = ["FirstRow", "check_context", "check_one_prompt", "check_prompts", "is_sequence", "nested"]

_MAX_ID = 2**63 - 1  # token ids are fed as int64


def check_prompts(
    prompts: Sequence[Sequence[int]], max_new_tokens: int, *, vocab_size: int | None, held_rows: int | None = None
) -> list[list[int]]:
    """The prompts as lists of ints.

    Args:
        vocab_size: token ids must be below it (None: unknown).
        held_rows: continuing a state of this many rows (one prompt each, possibly empty), else None.

    Raises:
        GenerationError: one line saying what is wrong; its ``field`` is ``max_new_tokens`` or ``prompts``.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise GenerationError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}", field="max_new_tokens")
    if not is_sequence(prompts):
        raise GenerationError(
            f"prompts must be a list of token id lists, got {type(prompts).__name__}", field="prompts"
        )
    rows = []
    for prompt in prompts:
        if not is_sequence(prompt):
            raise GenerationError(f"a prompt is a list of token ids, got {type(prompt).__name__}", field="prompts")
        odd = next((t for t in prompt if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer))), None)
        if odd is not None:
            raise GenerationError(f"token ids must be integers, got {odd!r} ({type(odd).__name__})", field="prompts")
        rows.append([int(t) for t in prompt])
    if not rows or (held_rows is None and not all(rows)):
        raise GenerationError("the prompt is empty: give at least one token id", field="prompts")
    if held_rows is not None and len(rows) != held_rows:
        raise GenerationError(
            f"continuing needs one prompt per row of the state ({held_rows}), got {len(rows)}", field="prompts"
        )
    bad = sorted({t for r in rows for t in r if t < 0 or t > _MAX_ID or (vocab_size is not None and t >= vocab_size)})
    if bad:
        limit = f"0..{vocab_size - 1}" if vocab_size is not None else "non-negative"
        raise GenerationError(
            f"token id(s) {', '.join(map(str, bad))} outside the vocabulary ({limit})", field="prompts"
        )
    return rows


def check_context(tokens: int, max_new_tokens: int, context: int | None, what: str) -> None:
    """Refuse a prompt of ``tokens`` tokens whose ``max_new_tokens`` would pass ``context``
    positions (``what`` names it: the model's, from its config, or a pool's ``max_context``; None:
    no limit), as vLLM refuses a request past ``max_model_len``: the positions past it are ones the
    model was not made for (learned position tables such as gpt2's have none).

    Raises:
        GenerationError: one line naming both numbers; its ``field`` is ``max_new_tokens``.
    """
    if context is not None and tokens + max_new_tokens > context:
        raise GenerationError(
            f"a prompt of {tokens} tokens and max_new_tokens {max_new_tokens} reach past {what} of {context} "
            f"positions ({tokens + max_new_tokens} > {context})",
            field="max_new_tokens",
        )


def is_sequence(value: object) -> bool:
    """A list, tuple, range or 1-d-or-more array: what a prompt (or a batch of them) may be."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def nested(prompt: object) -> bool:
    """True if ``prompt`` holds sequences (several prompts) rather than token ids."""
    if not is_sequence(prompt):
        return False  # not a prompt at all: the prompt checks say what is wrong
    return any(is_sequence(t) for t in prompt)  # type: ignore[attr-defined]


class FirstRow:
    """A batch stream (a token list per step) made of a one-row stream, passing ``end()`` on."""

    def __init__(self, stream: Callable[[int], None]) -> None:
        self.stream = stream

    def __call__(self, tokens: list[int]) -> None:
        self.stream(tokens[0])

    def end(self) -> None:
        end = getattr(self.stream, "end", None)
        if callable(end):
            end()


def check_one_prompt(prompt_ids: Sequence[int], search: dict[str, Any]) -> None:
    """Refuse what :meth:`Generator.generate` cannot take: no list of ids, several prompts, ``n`` > 1."""
    if not is_sequence(prompt_ids):
        raise GenerationError(f"the prompt is a text or a list of token ids, got {type(prompt_ids).__name__}")
    if nested(prompt_ids):
        raise GenerationError("generate() takes one prompt (a list of token ids); for several, use generate_batch()")
    if search.get("n") not in (None, 1):
        raise GenerationError(
            "generate() returns one sequence: for n > 1 choices use generate_batch(), whose rows are each "
            "prompt's n choices",
            field="n",
        )

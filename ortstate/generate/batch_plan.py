"""What a :class:`~.continuous.ContinuousBatcher` request becomes before it runs: its options checked
against the batcher, and its :class:`~.request.Request` (one per choice: the first carries the
others as its ``siblings``, which the engine starts on copies of its stream once its prompt is fed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import GenerationError
from .options import SearchOptions
from .prompts import check_context
from .request import Request
from .stopping import StopCriteria
from .structured import Grammars, Matcher

__all__ = ["batch_options", "plan_requests"]


def batch_options(
    defaults: dict[str, Any], slots: int, vocab_size: int | None, max_new_tokens: int, search: dict[str, Any]
) -> SearchOptions:
    """``search`` as :class:`SearchOptions` (``defaults`` filling the rest) that a batcher of
    ``slots`` rows runs.

    Raises:
        GenerationError: an option out of range or unknown (its ``field`` names it), beam search,
            stop strings (the batcher has no tokenizer), ``logit_bias`` ids outside the vocabulary,
            ``min_tokens`` over ``max_new_tokens``, ``n`` above ``slots``.
    """
    options = SearchOptions.build(defaults, **search)
    if options.beam_search:
        raise GenerationError(
            "ContinuousBatcher does not batch beam search; use Generator for num_beams > 1", field="num_beams"
        )
    if options.stop_strings:
        raise GenerationError(
            "ContinuousBatcher takes stop_token_ids, not stop strings (no tokenizer)", field="stop_strings"
        )
    if options.n > slots:
        raise GenerationError(f"n must be at most the pool's {slots} slots, got {options.n}", field="n")
    options.check_tokens(vocab_size, max_new_tokens)
    return options


def plan_requests(
    prompt: list[int],
    max_new_tokens: int,
    options: SearchOptions,
    eos: Sequence[int],
    context: int,
    grammars: Callable[[], Grammars] | None = None,
) -> list[Request]:
    """A prompt's ``options.n`` requests, choice ``i`` sampled with ``seed + i`` (as vLLM seeds its
    ``n`` children: choice 0 is what ``n=1`` gives); the first holds the others as its siblings.
    With a ``json_schema``, each choice has a matcher of its own (from ``grammars()``: the schema
    compiled once, each matcher a copy), its answer whole within ``max_new_tokens``.

    Raises:
        GenerationError: the prompt and ``max_new_tokens`` pass ``context`` (the pool's max_context);
            a schema the engine refuses, or whose shortest answer is longer than ``max_new_tokens``.
    """
    check_context(len(prompt), max_new_tokens, context, "the pool's max_context")
    seed = options.draw_seed()
    criteria = StopCriteria(eos, options.stop_token_ids, (), None, options.min_tokens)
    matchers: list[Matcher | None] = [None] * options.n
    if options.json_schema is not None:
        if grammars is None:
            raise GenerationError("json_schema needs the model's tokenizer", field="json_schema")
        found = grammars()
        matchers = [found.matcher(options.json_schema, criteria.token_ids, max_new_tokens) for _ in matchers]
    requests = [
        Request(
            list(prompt),
            int(max_new_tokens),
            options,
            criteria,
            sink=_nowhere,
            rng=None if seed is None else np.random.default_rng(seed + i),
            matcher=matchers[i],
        )
        for i in range(options.n)
    ]
    requests[0].siblings = requests[1:]
    return requests


def _nowhere(item: Any) -> None:
    """A request's sink until its owner gives it one."""

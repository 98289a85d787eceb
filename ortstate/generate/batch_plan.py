"""What a :class:`~.continuous.ContinuousBatcher` request becomes before it runs: its options checked
against the batcher, and its requests (:class:`~.request.Request`), complete (one per choice: the first
carries the others as its ``siblings``, which the engine starts on copies of its stream once its
prompt is fed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import GenerationError
from .kept import KeptStream
from .options import SearchOptions
from .prompts import check_context
from .request import Request
from .stopping import StopCriteria
from .structured import Grammars, Matcher

__all__ = ["batch_options", "plan_requests", "schema_matchers"]


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
    rids: Sequence[int],
    prompt: list[int],
    max_new_tokens: int,
    options: SearchOptions,
    eos: Sequence[int],
    context: int,
    sinks: Sequence[Callable[[Any], None]],
    *,
    notify: Callable[[], None] | None = None,
    streamed: bool = True,
    logprobs: int | None = None,
    kept: KeptStream | None = None,
    matchers: Sequence[Matcher] | None = None,
    started: Callable[[int], None] | None = None,
) -> list[Request]:
    """A prompt's ``options.n`` requests, complete (ids ``rids``, choice ``i``'s items to
    ``sinks[i]``), choice ``i`` sampled with ``seed + i`` (as vLLM seeds its ``n`` children: choice 0
    is what ``n=1`` gives); the first holds the others as its siblings. ``kept``: the kept stream
    the (one) request continues, feeding only what its cache lacks. ``matchers``: each choice's
    place in its ``json_schema``'s grammar (:func:`schema_matchers`; None: no schema).
    ``started``: told the prompt's tokens the first's stream held when it started.

    Raises:
        GenerationError: the prompt and ``max_new_tokens`` pass ``context`` (the pool's max_context).
    """
    check_context(len(prompt), max_new_tokens, context, "the pool's max_context")
    seed = options.draw_seed()
    criteria = StopCriteria(eos, options.stop_token_ids, (), None, options.min_tokens)
    common = dict(notify=notify, streamed=streamed, logprobs=logprobs)

    def request(i: int, **more: Any) -> Request:
        rng = None if seed is None else np.random.default_rng(seed + i)
        matcher = None if matchers is None else matchers[i]
        return Request(
            rids[i],
            list(prompt),
            int(max_new_tokens),
            options,
            criteria,
            sinks[i],
            rng=rng,
            matcher=matcher,
            **common,
            **more,
        )

    siblings = tuple(request(i) for i in range(1, options.n))
    reused = 0 if kept is None else kept.reuses(prompt)
    return [request(0, kept=kept, reused=reused, siblings=siblings, started=started), *siblings]


def schema_matchers(
    options: SearchOptions, eos: Sequence[int], max_new_tokens: int, grammars: Callable[[], Grammars]
) -> list[Matcher]:
    """Each of ``options.n`` choices' matcher of ``options.json_schema`` (from ``grammars()``: the
    schema compiled once, each matcher a copy), its answer whole within ``max_new_tokens``.

    Raises:
        GenerationError: a schema the engine refuses, or whose shortest answer is longer than
            ``max_new_tokens``; no tokenizer (from ``grammars``).
    """
    assert options.json_schema is not None
    criteria = StopCriteria(eos, options.stop_token_ids, (), None, options.min_tokens)
    found = grammars()
    return [found.matcher(options.json_schema, criteria.token_ids, max_new_tokens) for _ in range(options.n)]

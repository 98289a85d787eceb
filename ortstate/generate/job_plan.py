"""What a :meth:`~.generator.Generator.generate_batch` request becomes before anything runs: the
request checked against the generator's model and state, and the :class:`~.decoding.Job` that says
what it feeds first and how it picks and stops (the encoder run on its input, if one is given)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GenerationError
from .decoding import GenerationRun, Job
from .options import SearchOptions
from .prompts import check_context, check_prompts
from .sampler import RowState
from .stopping import StopCriteria
from .structured import Matcher, grammars_for

if TYPE_CHECKING:
    from .generator import Generator

__all__ = ["plan_job"]


def plan_job(
    generator: Generator,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stream: Callable[[list[int]], None] | None,
    encoder_input: np.ndarray | None,
    stop_at_eos: bool,
    keep_logits: bool,
    reset: bool,
    search: dict[str, Any],
) -> Job:
    """Check a :meth:`~.generator.Generator.generate_batch` request and decide what it feeds and how
    it picks and stops (running the encoder on ``encoder_input``: nothing else runs before the
    request is known good)."""
    if stream is not None and not callable(stream):
        raise GenerationError(f"stream must be a callable taking the new tokens, got {type(stream).__name__}")
    options = generator.search_options(**search)
    if options.beam_search and stream is not None:
        raise GenerationError("beam search cannot stream: its tokens are only known when it ends")
    held = generator.stepper.rows.rows if not reset and generator.stepper.rows.rows > 0 else None
    rows = check_prompts(prompts, max_new_tokens, vocab_size=generator.vocab_size, held_rows=held)
    options.check_tokens(generator.vocab_size, max_new_tokens)
    stepper = generator.stepper
    expand = options.n > 1 and stepper.beam_problem() is None and generator.layout.expands_by_beam_idx
    rebuild = (options.beam_search and not generator.layout.expands_by_beam_idx) or (options.n > 1 and not expand)
    chunks, from_empty, histories = stepper.rows.first_feed(rows, reset, rebuild=rebuild)
    check_context(max(map(len, histories)), max_new_tokens, generator.config.max_context, "the model's context")
    eos = generator.config.eos_token_ids if stop_at_eos else ()
    tokenizer = generator.tokenizer if options.stop_strings else None
    criteria = StopCriteria(eos, options.stop_token_ids, options.stop_strings, tokenizer, options.min_tokens)
    matchers = _matchers(generator, options, criteria, len(rows) * options.n, int(max_new_tokens))
    _encoder_context(generator, len(rows), encoder_input, reset)
    seed = options.draw_seed()
    encoded = generator.encoder.last_seconds if (generator.encoder and encoder_input is not None) else 0.0
    run = GenerationRun(
        max(len(c) for c in chunks), [[] for _ in range(len(rows) * options.n)], encoder_seconds=encoded, seed=seed
    )
    return Job(
        chunks=chunks,
        from_empty=from_empty,
        histories=histories,
        max_new_tokens=int(max_new_tokens),
        options=options,
        criteria=criteria,
        run=run,
        rows=[] if options.beam_search else _row_states(options, histories, criteria, run, seed),
        expand=expand,
        rng=np.random.default_rng(seed) if seed is not None and options.beam_search else None,
        stream=stream,
        keep_logits=keep_logits,
        pad=generator.config.pad_token_id if generator.config.pad_token_id is not None else 0,
        matchers=matchers,
    )


def _matchers(
    generator: Generator, options: SearchOptions, criteria: StopCriteria, rows: int, budget: int
) -> list[Matcher]:
    """Each row's matcher of ``options.json_schema`` (none without one), compiled for the generator's
    tokenizer and logits width (once per schema: :mod:`.structured`), its answer whole within ``budget``."""
    if options.json_schema is None:
        return []
    try:
        tokenizer = generator.tokenizer
    except GenerationError as exc:
        raise GenerationError(f"json_schema needs the model's tokenizer ({exc})", field="json_schema") from None
    grammars = grammars_for(tokenizer, generator.vocab_size)
    return [grammars.matcher(options.json_schema, criteria.token_ids, budget) for _ in range(rows)]


def _row_states(
    options: SearchOptions, histories: list[list[int]], criteria: StopCriteria, run: GenerationRun, seed: int | None
) -> list[RowState]:
    """Each row's picking state: prompt ``p``'s choice ``i`` is row ``p * n + i``, sampled with
    ``seed + i`` (as vLLM seeds its ``n`` children: choice 0 is what ``n=1`` gives)."""
    n = options.n
    return [
        RowState.start(
            options,
            history,
            criteria.token_ids,
            None if seed is None else np.random.default_rng(seed + i),
            output=run.tokens[p * n + i],
        )
        for p, history in enumerate(histories)
        for i in range(n)
    ]


def _encoder_context(generator: Generator, rows: int, encoder_input: np.ndarray | None, reset: bool) -> None:
    """Run the encoder on ``encoder_input`` if given; check an encoder-decoder has an output for ``rows`` rows."""
    if encoder_input is not None:
        if not reset:
            raise GenerationError("encoder_input starts a new generation: it cannot be given with reset=False")
        generator.encode(encoder_input)
    if generator.rules.needs_encoder and generator.encoder_output is None:
        raise GenerationError("an encoder-decoder needs an encoder input (encoder_input=...)")
    hidden = generator.encoder_output
    if hidden is not None and hidden.shape[0] != rows:
        raise GenerationError(f"the encoder output has batch {hidden.shape[0]}, the prompts {rows}")

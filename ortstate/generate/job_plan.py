"""What a :meth:`~.generator.Generator.generate_batch` request becomes before anything runs: the
request checked against the generator's model and state, and the :class:`~.decoding.Job` that says
what it feeds first and how it picks and stops (the encoder run on its input, if one is given)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GenerationError
from .decoding import GenerationRun, Job
from .prompts import check_prompts
from .stopping import StopCriteria

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
    _encoder_context(generator, len(rows), encoder_input, reset)
    rebuild = options.beam_search and not generator.layout.expands_by_beam_idx
    chunks, from_empty, histories = generator.stepper.rows.first_feed(rows, reset, rebuild=rebuild)
    seed = options.draw_seed()
    encoded = generator.encoder.last_seconds if (generator.encoder and encoder_input is not None) else 0.0
    run = GenerationRun(max(len(c) for c in chunks), [[] for _ in rows], encoder_seconds=encoded, seed=seed)
    eos = generator.config.eos_token_ids if stop_at_eos else ()
    tokenizer = generator.tokenizer if options.stop_strings else None
    criteria = StopCriteria(eos, options.stop_token_ids, options.stop_strings, tokenizer)
    return Job(
        chunks=chunks,
        from_empty=from_empty,
        histories=histories,
        max_new_tokens=int(max_new_tokens),
        options=options,
        criteria=criteria,
        run=run,
        rng=np.random.default_rng(seed) if seed is not None else None,
        stream=stream,
        keep_logits=keep_logits,
        pad=generator.config.pad_token_id if generator.config.pad_token_id is not None else 0,
    )


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

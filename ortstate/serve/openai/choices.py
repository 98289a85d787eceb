"""``n`` > 1 choices of one request: the prompt fed once, then each choice its own copy of the
stream (:meth:`~ortstate.generate.ContinuousBatcher.stream_choices`), its own text (a
:class:`~.service.Generation` each) and its own seed (``seed + i``, as vLLM's ``n`` children)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from .service import Generation

__all__ = ["choice_pieces", "choices_of"]


def choices_of(generation: Generation) -> list[Generation]:
    """A request's ``n`` choices (``generation`` first), each with a text of its own."""
    g = generation
    more = [
        Generation(g.service, g.prompt, g.max_tokens, g.sampling, g.search, g.prompt_text, index=i)
        for i in range(1, g.sampling.n)
    ]
    return [g, *more]


async def choice_pieces(choices: list[Generation]) -> AsyncIterator[tuple[int, str, list[int]]]:
    """``n`` > 1 choices (:meth:`Generation.choices`) over one prefill: (choice, the text now final,
    its tokens since its last piece) as each token comes, then each choice's last piece. A choice
    cut at a stop string takes no more tokens: its request is cancelled (the others go on)."""
    first = choices[0]
    batcher, sampling = first.service.batcher, first.sampling
    stream = batcher.stream_choices(
        first.prompt,
        first.max_tokens,
        logprobs=sampling.logprobs,
        stop_at_eos=not sampling.ignore_eos,
        **first.search,
    )
    async with contextlib.aclosing(stream):
        async for index, item in stream:
            choice = choices[index]
            if choice.finish is None:
                piece = choice.take(item)
                if choice.finish is not None:  # cut at a stop string: its request ends now
                    stream.cancel(index)
                yield (index, *piece)
    for choice in choices:
        last = choice.close() if choice.finish is None else None
        if last is not None:
            yield (choice.index, *last)

"""``n`` > 1 choices of one request: the prompt fed once, then each choice its own copy of the
stream (:meth:`~ortstate.generate.ContinuousBatcher.stream_choices`), its own text (a
:class:`~.generation.Generation` each) and its own seed (``seed + i``, as vLLM's ``n`` children);
and their answer, in one body or streamed (:func:`answer_choices`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...errors import OrtStateError
from .errors import failed
from .generation import Generation
from .logprobs import LogprobsShaper
from .replies import event, run_to_end, streamed, unless_gone
from .responses import choice, chunk, response, usage

if TYPE_CHECKING:
    from .service import LlmService

__all__ = ["answer_choices", "choice_pieces", "choices_of"]


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
    stream = first.source if first.source is not None else first.open()
    async with contextlib.aclosing(stream):
        try:
            async for index, item in stream:
                choice = choices[index]
                if choice.finish is None:
                    piece = choice.take(item)
                    if choice.finish is not None:  # cut at a stop string: its request ends now
                        stream.cancel(index)
                    yield (index, *piece)
        finally:
            first.cached = stream.cached_tokens  # the prompt fed once, for all of them
    for choice in choices:
        last = choice.close() if choice.finish is None else None
        if last is not None:
            yield (choice.index, *last)


async def answer_choices(
    service: LlmService, request: Request, choices: list[Generation], rid: str, chat: bool, release: Callable[[], Any]
) -> Response:
    """The answer of ``n`` > 1 choices (never in a conversation): ``choices`` in one body, or each
    streamed chunk carrying its choice's ``index``; usage counts every choice's tokens."""
    if choices[0].sampling.stream:
        return streamed(_choice_events(choices, rid, chat, release), release)
    try:
        await unless_gone(request, run_to_end(choice_pieces(choices)))
    finally:
        release()
    sampling = choices[0].sampling

    def render() -> JSONResponse:
        bodies = []
        for c in choices:
            ids = (c.prompt, c.tokens) if sampling.token_ids else None
            shaped = None if sampling.logprobs is None else LogprobsShaper(service.tokenizer, chat).shape(c.scored)
            bodies.append(choice(chat, c.index, c.text, str(c.finish_reason), ids, shaped, c.call))
        return JSONResponse(response(rid, service.model_id, chat, bodies, _choices_usage(choices)))

    # off the event loop: n choices' top logprobs are megabytes to shape and render
    return await service.prompts.run(render)


def _choices_usage(choices: list[Generation]) -> dict[str, Any]:
    return usage(len(choices[0].prompt), sum(len(c.tokens) for c in choices), choices[0].cached)


async def _choice_events(
    choices: list[Generation], rid: str, chat: bool, release: Callable[[], Any]
) -> AsyncIterator[bytes]:
    """The server-sent events of ``n`` choices: each chunk one choice's piece (its ``index``), the
    finish chunks once every choice ended, then the usage (if asked for) and ``[DONE]``."""
    first = choices[0]
    model, sampling = first.service.model_id, first.sampling
    extra = {"with_usage": sampling.include_usage}
    shaper = None if sampling.logprobs is None else LogprobsShaper(first.service.tokenizer, chat)
    shaped = [0] * len(choices)  # tokens of each choice whose logprobs went out
    named = [False] * len(choices)  # a tool call's first piece names it
    try:
        for c in choices if chat else ():
            yield event(chunk(rid, model, chat, role=True, index=c.index, **extra))
        try:
            async for index, text, ids in choice_pieces(choices):
                logprobs, done = None, shaped[index]
                if shaper is not None:
                    logprobs = shaper.shape(choices[index].scored[done : done + len(ids)])
                    shaped[index] = done + len(ids)
                pieces = ids if sampling.token_ids else None
                call, first = choices[index].call, not named[index]
                named[index] = True
                yield event(
                    chunk(
                        rid,
                        model,
                        chat,
                        text,
                        ids=pieces,
                        logprobs=logprobs,
                        index=index,
                        call=call,
                        first=first,
                        **extra,
                    )
                )
        except OrtStateError as exc:
            yield event(failed(exc).body())
            return
        for c in choices:
            yield event(chunk(rid, model, chat, "", c.finish_reason, index=c.index, **extra))
        if sampling.include_usage:
            yield event(chunk(rid, model, chat, used=_choices_usage(choices)))
        yield b"data: [DONE]\n\n"
    finally:
        release()

"""The ASGI app of ``ortstate serve`` for an LLM folder: OpenAI's API over an :class:`LlmService`.

``GET /v1/models`` (and ``/v1/models/{id}``), ``POST /v1/completions``, ``POST /v1/chat/completions``
(see :mod:`.api` for what they take), ``GET /v1/health``. With ``"stream": true`` a response
is server-sent events: a chunk per generated token (``data: {...}``, then ``data: [DONE]``); an
error after the first chunk is sent as a last ``data: {"error": ...}`` event. A client that goes
away (closes the stream, or its connection while waiting for a whole response) cancels its request.
Every error, routing ones and 401 included, has OpenAI's body (``application/json``); a body is
read within bounds (:mod:`ortstate.serve.json_body`); a 503 says when to come back (``Retry-After``); an internal
error is a 500 whose message is a log id, and the server's log line with that id holds the
traceback. A request with the header ``X-Ortstate-Conversation`` continues that conversation's
cache (:mod:`.conversations`); its answer names the server that held it in ``X-Ortstate-Server``.
``DELETE /v1/conversations/{id}`` removes one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ...errors import OrtStateError, ServeError
from ..auth import BearerAuth
from ..json_body import read_json
from ..lifespan import parking_lifespan
from .api import ApiError, chunk, completion, new_id, parse_chat, parse_completion, usage
from .choices import choice_pieces, choices_of
from .conversations import HEADER
from .errors import api_error, failed, http_error, internal_error, logged_app
from .logprobs import LogprobsShaper
from .responses import choice, response
from .service import Generation, LlmService

__all__ = ["DEFAULT_MAX_BODY_BYTES", "SERVER_HEADER", "UNAUTHORIZED", "create_llm_app"]

DEFAULT_MAX_BODY_BYTES = 1 << 20
SERVER_HEADER = "x-ortstate-server"  # on a conversation's answers: the server (host-pid) that held it
UNAUTHORIZED = ApiError(
    "missing or wrong API key (send Authorization: Bearer TOKEN)", 401, error_code="invalid_api_key"
)


def create_llm_app(
    service: LlmService,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    idle_park: float | None = None,
) -> Any:
    """The ASGI app serving ``service`` with OpenAI's API.

    Args:
        token: if given, every request must carry ``Authorization: Bearer TOKEN`` (OpenAI's clients
            send their ``api_key`` so).
        max_body_bytes: the largest request body (a larger one is answered 413).
        idle_park: park conversations idle that long (seconds; needs the service's state directory).
    """

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [service.model_card()]})

    async def model(request: Request) -> JSONResponse:
        service.check_model(request.path_params["id"])
        return JSONResponse(service.model_card())

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def completions(request: Request) -> Response:
        return await _answer(service, request, parse_completion, max_body_bytes, chat=False)

    async def chat(request: Request) -> Response:
        return await _answer(service, request, parse_chat, max_body_bytes, chat=True)

    async def delete_conversation(request: Request) -> JSONResponse:
        cid = request.path_params["id"]
        await service.conversations.delete(cid)
        return JSONResponse({"id": cid, "object": "conversation.deleted", "deleted": True})

    routes = [
        Route("/v1/models", models),
        Route("/v1/models/{id:path}", model),
        Route("/v1/health", health),
        Route("/health", health),  # where vLLM's is: load tools (guidellm) check it first
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/conversations/{id}", delete_conversation, methods=["DELETE"]),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        ApiError: api_error,
        HTTPException: http_error,
        Exception: internal_error,
    }

    conversations = service.conversations

    async def tend(_: float) -> None:
        await conversations.tend(idle_park)

    async def stop() -> None:
        await service.park_all()
        conversations.release()  # its log folder goes now: a Ray replica has no later end

    every = min((s for s in (idle_park, conversations.ttl) if s is not None), default=None)
    lifespan = parking_lifespan(tend, stop, every, "conversations", (OrtStateError, OSError))
    app = logged_app(Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan))
    body = json.dumps(UNAUTHORIZED.body()).encode()
    return app if token is None else BearerAuth(app, token, error_body=body)


async def _body(request: Request, limit: int) -> Any:
    """The request's JSON body, read up to ``limit`` bytes, parsed within :mod:`ortstate.serve.json_body`'s bounds.

    Raises:
        ApiError: 413 over the limit; 400 not UTF-8, not JSON, or out of those bounds (naming the
            field of a lone surrogate); 499 the client went away (a deadline closed its connection).
    """
    data = bytearray()
    try:
        async for part in request.stream():
            data += part
            if len(data) > limit:
                raise ApiError(f"the request body is over {limit} bytes", 413)
    except ClientDisconnect:
        raise ApiError("the client went away", 499) from None
    try:
        return read_json(data)
    except ServeError as exc:
        raise ApiError(str(exc), param=exc.field) from None


async def _answer(
    service: LlmService, request: Request, parse: Callable[[Any], Any], limit: int, chat: bool
) -> Response:
    parsed = parse(await _body(request, limit))
    cid = request.headers.get(HEADER)
    service.check(parsed)  # another model, bad options: refused before a place or a conversation is taken
    admitted = service.admit()  # 503 now, before any byte of the answer; given back when it ends

    conversation = None
    released = False
    parking: list[asyncio.Task[None]] = []  # the turn being logged (see Conversations.done)

    def release() -> asyncio.Task[None] | None:  # once the answer ends, however it ends (more calls do nothing)
        nonlocal released
        if not released:
            released = True
            if cid is not None and conversation is not None:
                task = service.conversations.done(cid)
                parking.extend([task] if task is not None else [])
            admitted()
        return parking[0] if parking else None

    try:
        conversation = None if cid is None else await service.conversations.take(cid)
        generation = await service.start(parsed, conversation)
    except BaseException:
        release()
        raise
    headers = {} if cid is None else {HEADER: cid, SERVER_HEADER: service.conversations.name}

    rid = new_id(chat)
    if generation.sampling.n > 1:
        return await _answer_choices(service, request, choices_of(generation), rid, chat, release)
    if generation.sampling.stream:
        return StreamingResponse(
            _events(generation, rid, chat, release),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no", **headers},
            background=BackgroundTask(_on_loop, release),  # also when the events never started (a client gone at once)
        )
    try:
        await _unless_gone(request, _run(generation))
    finally:
        ending = release()
    await _turn_kept(ending)
    ids = (generation.prompt, generation.tokens) if generation.sampling.token_ids else None
    scored = None if generation.sampling.logprobs is None else LogprobsShaper(service.tokenizer, chat)
    logprobs = None if scored is None else scored.shape(generation.scored)
    body = completion(
        rid, service.model_id, chat, generation.text, str(generation.finish), _usage(generation), ids, logprobs
    )
    return JSONResponse(body, headers=headers)


async def _turn_kept(ending: asyncio.Task[None] | None) -> None:
    """Wait for a conversation's turn to be logged (and, shared, the conversation parked), which
    :meth:`~.conversations.Conversations.done` started: the answer ends only then, so a next turn,
    or a server started after a hard stop, finds it. Shielded: a client gone meanwhile does not stop
    it.

    Raises:
        ApiError: 500, the turn could not be logged.
    """
    if ending is not None:
        await asyncio.shield(ending)


async def _on_loop(release: Callable[[], Any]) -> None:
    """``release()`` on the event loop (Starlette runs a plain function's background task in a
    thread, where the conversations' tasks cannot be made)."""
    release()


def _usage(generation: Generation) -> dict[str, Any]:
    return usage(len(generation.prompt), len(generation.tokens), generation.cached)


async def _run(generation: Generation) -> None:
    try:
        async for _ in generation.pieces():
            pass
    except OrtStateError as exc:
        raise failed(exc) from None


async def _unless_gone(request: Request, work: Awaitable[None]) -> None:
    """Await ``work``, cancelling it if the client disconnects first (its body is read already, so
    the next message is the disconnect)."""
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this request itself is cancelled (the server stopping)
        watch.cancel()
        task.cancel()
        raise
    watch.cancel()
    if not task.done():  # the client went first: its generation ends (the batcher drops it)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ApiError("the client went away", 499)
    task.result()


async def _events(
    generation: Generation, rid: str, chat: bool, release: Callable[[], Awaitable[None] | None]
) -> AsyncIterator[bytes]:
    """The server-sent events of a streamed answer (cancelled by Starlette when the client goes)."""
    model, sampling = generation.service.model_id, generation.sampling
    extra = {"with_usage": sampling.include_usage}
    scored = None if sampling.logprobs is None else LogprobsShaper(generation.service.tokenizer, chat)
    shaped = 0  # tokens whose logprobs went out
    try:
        if chat:
            yield _event(chunk(rid, model, chat, role=True, **extra))
        try:
            async for text, ids in generation.pieces():
                pieces = ids if sampling.token_ids else None
                logprobs = None
                if scored is not None:
                    logprobs, shaped = scored.shape(generation.scored[shaped : shaped + len(ids)]), shaped + len(ids)
                yield _event(chunk(rid, model, chat, text, ids=pieces, logprobs=logprobs, **extra))
        except OrtStateError as exc:
            yield _event(failed(exc).body())
            return
        yield _event(chunk(rid, model, chat, "", generation.finish, **extra))
        if sampling.include_usage:
            yield _event(chunk(rid, model, chat, used=_usage(generation)))
        try:  # before the last event: a next turn sent once it arrives finds the conversation
            await _turn_kept(release())
        except ApiError as exc:
            yield _event(exc.body())
            return
        yield b"data: [DONE]\n\n"
    finally:
        release()


# -- n > 1 choices -----------------------------------------------------------------------------------
async def _answer_choices(
    service: LlmService, request: Request, choices: list[Generation], rid: str, chat: bool, release: Callable[[], Any]
) -> Response:
    """The answer of ``n`` > 1 choices (never in a conversation): ``choices`` in one body, or each
    streamed chunk carrying its choice's ``index``; usage counts every choice's tokens."""
    if choices[0].sampling.stream:
        return StreamingResponse(
            _choice_events(choices, rid, chat, release),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
            background=BackgroundTask(_on_loop, release),
        )
    try:
        await _unless_gone(request, _run_choices(choices))
    finally:
        release()
    sampling = choices[0].sampling
    bodies = []
    for c in choices:
        ids = (c.prompt, c.tokens) if sampling.token_ids else None
        shaped = None if sampling.logprobs is None else LogprobsShaper(service.tokenizer, chat).shape(c.scored)
        bodies.append(choice(chat, c.index, c.text, str(c.finish), ids, shaped))
    return JSONResponse(response(rid, service.model_id, chat, bodies, _choices_usage(choices)))


def _choices_usage(choices: list[Generation]) -> dict[str, Any]:
    return usage(len(choices[0].prompt), sum(len(c.tokens) for c in choices))


async def _run_choices(choices: list[Generation]) -> None:
    try:
        async for _ in choice_pieces(choices):
            pass
    except OrtStateError as exc:
        raise failed(exc) from None


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
    try:
        for c in choices if chat else ():
            yield _event(chunk(rid, model, chat, role=True, index=c.index, **extra))
        try:
            async for index, text, ids in choice_pieces(choices):
                logprobs, done = None, shaped[index]
                if shaper is not None:
                    logprobs = shaper.shape(choices[index].scored[done : done + len(ids)])
                    shaped[index] = done + len(ids)
                pieces = ids if sampling.token_ids else None
                yield _event(chunk(rid, model, chat, text, ids=pieces, logprobs=logprobs, index=index, **extra))
        except OrtStateError as exc:
            yield _event(failed(exc).body())
            return
        for c in choices:
            yield _event(chunk(rid, model, chat, "", c.finish, index=c.index, **extra))
        if sampling.include_usage:
            yield _event(chunk(rid, model, chat, used=_choices_usage(choices)))
        yield b"data: [DONE]\n\n"
    finally:
        release()


def _event(body: Any) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"

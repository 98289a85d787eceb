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
``DELETE /v1/conversations/{id}`` removes one. ``POST /tokenize`` and ``POST /detokenize`` are
vLLM's (:mod:`.tokenize`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import OrtStateError, ServeError
from ..auth import BearerAuth
from ..json_body import read_json
from ..lifespan import parking_lifespan
from ..origin import OriginCheck
from .access_log import TOKENS, AccessLog
from .api import ApiError, parse_chat, parse_completion
from .choices import answer_choices, choices_of
from .conversations import HEADER
from .errors import api_error, error_body, failed, http_error, internal_error, logged_app
from .fields import short
from .generation import Generation
from .logprobs import LogprobsShaper
from .metrics import CONTENT_TYPE as METRICS_TYPE
from .replies import event, run_to_end, streamed, unless_gone
from .responses import chunk, completion, new_id, usage
from .service import LlmService
from .tokenize import parse_detokenize, parse_tokenize

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
    allow_origins: tuple[str, ...] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    idle_park: float | None = None,
    access_log: bool = True,
) -> Any:
    """The ASGI app serving ``service`` with OpenAI's API.

    Args:
        token: if given, every request must carry ``Authorization: Bearer TOKEN`` (OpenAI's clients
            send their ``api_key`` so).
        allow_origins: web pages' origins let in besides the server's own (:mod:`ortstate.serve.origin`).
        max_body_bytes: the largest request body (a larger one is answered 413).
        idle_park: park conversations idle that long (seconds; needs the service's state directory).
        access_log: a line per request on ``ortstate.serve.access`` (:mod:`.access_log`).
    """
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        ApiError: api_error,
        HTTPException: http_error,
        Exception: internal_error,
    }
    routes = _routes(service, max_body_bytes)
    app = logged_app(Starlette(routes=routes, exception_handlers=handlers, lifespan=_lifespan(service, idle_park)))
    body = json.dumps(UNAUTHORIZED.body()).encode()
    app = app if token is None else BearerAuth(app, token, error_body=body)
    app = OriginCheck(app, token=token is not None, allow_origins=allow_origins, error_body=error_body)
    return AccessLog(app) if access_log else app


def _routes(service: LlmService, limit: int) -> list[Route]:
    """The endpoints: the model, health, the two generations and tokenizing (bodies of ``limit``
    bytes at most), deleting a conversation."""

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [service.model_card()]})

    async def model(request: Request) -> JSONResponse:
        service.check_model(request.path_params["id"])
        return JSONResponse(service.model_card())

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def completions(request: Request) -> Response:
        return await _answer(service, request, parse_completion, limit, chat=False)

    async def chat(request: Request) -> Response:
        return await _answer(service, request, parse_chat, limit, chat=True)

    async def tokenize(request: Request) -> JSONResponse:
        asked = parse_tokenize(await _body(request, limit))
        if asked.model is not None:
            service.check_model(asked.model)
        # Tokenized, its token strings looked up and the answer rendered off the event loop: a body
        # of 1 MiB can be a million tokens.
        return await service.prompts.run(lambda: JSONResponse(asked.answer(service.tokenizer, service.context)))

    async def detokenize(request: Request) -> JSONResponse:
        tokenizer = service.tokenizer
        asked = parse_detokenize(await _body(request, limit), tokenizer.backend.get_vocab_size(with_added_tokens=True))
        if asked.model is not None:
            service.check_model(asked.model)
        return JSONResponse({"prompt": await service.prompts.run(tokenizer.decode, asked.tokens, False)})

    async def metrics(request: Request) -> Response:
        return Response(service.metrics.text(), media_type=METRICS_TYPE)

    async def delete_conversation(request: Request) -> JSONResponse:
        cid = request.path_params["id"]
        await service.conversations.delete(cid)
        return JSONResponse({"id": cid, "object": "conversation.deleted", "deleted": True})

    return [
        Route("/v1/models", models),
        Route("/v1/models/{id:path}", model),
        Route("/v1/health", health),
        Route("/health", health),  # where vLLM's is: load tools (guidellm) check it first
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/metrics", metrics),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/v1/conversations/{id}", delete_conversation, methods=["DELETE"]),
    ]


def _lifespan(service: LlmService, idle_park: float | None) -> Any:
    """Conversations expired and parked as they idle (every ``idle_park`` or TTL, the shorter),
    all of them parked when the app stops."""
    conversations = service.conversations

    async def tend(_: float) -> None:
        await conversations.tend(idle_park)

    async def stop() -> None:
        await service.park_all()
        conversations.release()  # its log folder goes now: a Ray replica has no later end

    every = min((s for s in (idle_park, conversations.ttl) if s is not None), default=None)
    return parking_lifespan(tend, stop, every, "conversations", (OrtStateError, OSError))


async def _body(request: Request, limit: int) -> Any:
    """The request's JSON body, read up to ``limit`` bytes, parsed within :mod:`ortstate.serve.json_body`'s bounds.

    Raises:
        ApiError: 415 a ``Content-Type`` other than JSON's (:func:`_check_json_type`); 413 over the
            limit; 400 not UTF-8, not JSON, or out of those bounds (naming the field of a lone
            surrogate); 499 the client went away (a deadline closed its connection).
    """
    _check_json_type(request.headers.get("content-type"))
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


def _check_json_type(given: str | None) -> None:
    """A body is JSON: sent as ``application/json`` (or a ``+json`` type), or with no type, which
    is read as JSON (FastAPI, vLLM's, does the same: scripts post JSON without saying so). Any other
    type is refused (415; vLLM refuses it too): a form (``curl -d``) or ``text/plain`` is no JSON
    body, and a web page can make a browser post those to a server on loopback without asking it
    first (a browser's request carries an ``Origin``, which :mod:`..origin` refuses as well).

    Raises:
        ApiError: 415 naming ``content-type``.
    """
    if given is None:
        return
    media = given.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise ApiError(
            f"content-type must be application/json, got {short(given)}",
            415,
            param="content-type",
            error_code="unsupported_media_type",
        )


async def _answer(
    service: LlmService, request: Request, parse: Callable[[Any], Any], limit: int, chat: bool
) -> Response:
    arrived = time.monotonic()
    parsed = parse(await _body(request, limit))
    cid = request.headers.get(HEADER)
    service.check(parsed)  # another model, bad options: refused before a place or a conversation is taken
    admitted = service.admit()  # 503 now, before any byte of the answer; given back when it ends

    conversation = None
    released = False
    parking: list[asyncio.Task[None]] = []  # the turn being logged (see Conversations.done)
    answered: list[Generation] = []  # its choices, counted as it ends

    def release() -> asyncio.Task[None] | None:  # once the answer ends, however it ends (more calls do nothing)
        nonlocal released
        if not released:
            released = True
            if cid is not None and conversation is not None:
                task = service.conversations.done(cid)
                parking.extend([task] if task is not None else [])
            admitted()
            _counted(service, request, answered, arrived)
        return parking[0] if parking else None

    try:
        conversation = None if cid is None else await service.conversations.take(cid)
        generation = await service.start(parsed, conversation)
    except BaseException:
        release()
        raise
    headers = {} if cid is None else {HEADER: cid, SERVER_HEADER: service.conversations.name}

    rid = new_id(chat)
    answered.append(generation)
    if generation.sampling.n > 1:
        answered[:] = choices_of(generation)
        return await answer_choices(service, request, answered, rid, chat, release)
    if generation.sampling.stream:
        return streamed(_events(generation, rid, chat, release), release, headers)
    try:
        await unless_gone(request, run_to_end(generation.pieces()))
    finally:
        ending = release()
    await _turn_kept(ending)

    def render() -> JSONResponse:
        ids = (generation.prompt, generation.tokens) if generation.sampling.token_ids else None
        scored = None if generation.sampling.logprobs is None else LogprobsShaper(service.tokenizer, chat)
        logprobs = None if scored is None else scored.shape(generation.scored)
        finish, call = str(generation.finish_reason), generation.call
        body = completion(rid, service.model_id, chat, generation.text, finish, _usage(generation), ids, logprobs, call)
        return JSONResponse(body, headers=headers)

    # off the event loop: a body of every token's top logprobs is megabytes to shape and render
    return await service.prompts.run(render)


def _counted(service: LlmService, request: Request, choices: list[Generation], arrived: float) -> None:
    """An answer's figures (/metrics) and its tokens for the access log's line."""
    service.metrics.answered(choices, arrived)
    if choices:
        first = choices[0]
        setattr(request.state, TOKENS, (len(first.prompt), first.cached, sum(len(c.tokens) for c in choices)))


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


def _usage(generation: Generation) -> dict[str, Any]:
    return usage(len(generation.prompt), len(generation.tokens), generation.cached)


async def _events(
    generation: Generation, rid: str, chat: bool, release: Callable[[], Awaitable[None] | None]
) -> AsyncIterator[bytes]:
    """The server-sent events of a streamed answer (cancelled by Starlette when the client goes)."""
    model, sampling = generation.service.model_id, generation.sampling
    extra = {"with_usage": sampling.include_usage}
    scored = None if sampling.logprobs is None else LogprobsShaper(generation.service.tokenizer, chat)
    shaped = 0  # tokens whose logprobs went out
    call, first = generation.call, True  # a tool call's first piece names it
    try:
        if chat:
            yield event(chunk(rid, model, chat, role=True, **extra))
        try:
            async for text, ids in generation.pieces():
                pieces = ids if sampling.token_ids else None
                logprobs = None
                if scored is not None:
                    logprobs, shaped = scored.shape(generation.scored[shaped : shaped + len(ids)]), shaped + len(ids)
                yield event(
                    chunk(rid, model, chat, text, ids=pieces, logprobs=logprobs, call=call, first=first, **extra)
                )
                first = False
        except OrtStateError as exc:
            yield event(failed(exc).body())
            return
        yield event(chunk(rid, model, chat, "", generation.finish_reason, **extra))
        if sampling.include_usage:
            yield event(chunk(rid, model, chat, used=_usage(generation)))
        try:  # before the last event: a next turn sent once it arrives finds the conversation
            await _turn_kept(release())
        except ApiError as exc:
            yield event(exc.body())
            return
        yield b"data: [DONE]\n\n"
    finally:
        release()

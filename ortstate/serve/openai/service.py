"""What ``ortstate serve`` does for an LLM folder behind the OpenAI API: one
:class:`~ortstate.generate.ContinuousBatcher` generating for every request at once, the folder's
tokenizer and chat template around it, and how many requests it takes at once.

A request is tokenized once, off the event loop (:mod:`.prompt_tokens`), and checked before
anything runs; its text is then made token by token (:mod:`.generation`). A request constrained to
a JSON schema (:mod:`.formats`) has its batcher stream made beforehand, in one of
:data:`GRAMMAR_THREADS` threads: the grammar is compiled there (the first time a schema is seen, or
once it left the batcher's cache of compiled schemas), and what llguidance refuses is a 400.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ...errors import GenerationError
from ...generate import (
    ContinuousBatcher,
    Tokenizer,
    find_model_files,
)
from ...generate.prompts import check_prompts
from ...runtime.cpu import usable_cores
from .api import ApiError, ChatRequest, CompletionRequest, Sampling
from .conversation_store import Conversation
from .conversations import HEADER, Conversations
from .fields import short
from .formats import schema_error
from .generation import Generation
from .metrics import ServerMetrics
from .prompt_tokens import PromptTokens

__all__ = ["GRAMMAR_THREADS", "LlmService"]

GRAMMAR_THREADS = 2  # schemas compiled at once (more wait their turn: each holds a place already)


class LlmService:
    """Requests of one model on one batcher.

    Args:
        batcher: generates (its pool's ``max_context`` is the context length).
        tokenizer: the folder's, with its chat template.
        model_id: the name clients give as ``model``.
        max_requests: requests at once (generating or waiting for a row); one more is refused (503).
    """

    def __init__(
        self,
        batcher: ContinuousBatcher,
        tokenizer: Tokenizer,
        model_id: str,
        max_requests: int,
        conversations: Conversations | None = None,
        threads: int | None = None,
    ) -> None:
        self.batcher = batcher
        self.threads = threads  # ONNX Runtime's intra-op threads, where known
        self.conversations = conversations or Conversations(batcher, None)
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.max_requests = max_requests
        self.context = batcher.pool.max_context
        self.created = int(time.time())
        self.in_flight = 0
        self.draining = False
        self.prompts = PromptTokens(tokenizer, self.context)
        self.metrics = ServerMetrics(model_id, batcher.stats)
        self._grammar_threads = ThreadPoolExecutor(GRAMMAR_THREADS, thread_name_prefix="ortstate-grammar")

    @classmethod
    def from_dir(
        cls,
        folder: str | os.PathLike[str],
        *,
        model_name: str | None = None,
        max_requests: int = 1024,
        slots: int = 64,
        threads: int | None = None,
        kv_cache_bytes: int | None = None,
        prefix_cache: bool = True,
        max_model_len: int | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        max_conversations: int = 1024,
        shared: bool = False,
        max_parked_bytes: int | None = None,
        conversation_ttl: float | None = None,
    ) -> LlmService:
        """Load an optimum-intel folder's decoder into a batcher of ``slots`` rows on ``threads`` ONNX
        Runtime threads (default: the cores this process may use), each request reaching
        ``max_model_len`` positions (default: the model's context) within ``kv_cache_bytes`` of KV
        memory for all (default: a quarter of the machine's), with a prefix cache in it unless
        ``prefix_cache`` is False (:class:`ContinuousBatcher`'s), and its tokenizer;
        conversations are kept (``max_conversations`` at most, each for ``conversation_ttl``
        seconds idle if given) and, with ``state_dir``, logged and parked there, which holds
        ``max_parked_bytes`` at most (``shared``: a directory servers behind one router share, see
        :mod:`.conversations`).

        Raises:
            GenerationError: no decoder-only IR, no tokenizer.json, or a chat template that does not parse (a
                base model without one is served: its chat requests are answered 400); and whatever
                :meth:`ContinuousBatcher.from_dir` raises (all ``OrtStateError``).
        """
        files = find_model_files(folder)  # no IR: said first
        if files.encoder or files.embeddings:
            part = "an encoder" if files.encoder else "a text-embeddings model"
            raise GenerationError(f"{files.folder}: has {part}: ortstate serve takes decoder-only LLMs (token ids in)")
        tokenizer = Tokenizer.from_dir(folder)
        if tokenizer.chat_template:  # one that does not parse is refused now; none: chat requests get a 400
            tokenizer.check_chat_template()
        tokenizer.bound  # noqa: B018 - read the vocabulary for it now, not in the first request
        used = threads or usable_cores()
        batcher = ContinuousBatcher.from_dir(
            folder,
            slots=slots,
            threads=used,
            kv_cache_bytes=kv_cache_bytes,
            prefix_cache=prefix_cache,
            max_context=max_model_len,
            tokenizer=tokenizer,
        )
        try:
            conversations = Conversations(
                batcher, state_dir, max_conversations, shared=shared, max_bytes=max_parked_bytes, ttl=conversation_ttl
            )
        except BaseException:
            batcher.close()
            raise
        name = model_name or Path(folder).resolve().name
        return cls(batcher, tokenizer, name, max_requests, conversations, threads=used)

    @property
    def lost(self) -> dict[str, str]:
        """Conversations that could not be parked at shutdown: why."""
        return self.conversations.lost

    # -- what the API shows ---------------------------------------------------------------------------
    def model_card(self) -> dict[str, Any]:
        return {
            "id": self.model_id,
            "object": "model",
            "created": self.created,
            "owned_by": "ortstate",
            "max_model_len": self.context,
        }

    def check_model(self, model: str) -> None:
        if model != self.model_id:
            raise ApiError(
                f"the model {short(model)} does not exist: this server serves '{self.model_id}'",
                404,
                param="model",
                error_code="model_not_found",
            )

    # -- admission ----------------------------------------------------------------------------------
    def admit(self) -> Callable[[], None]:
        """Take one of ``max_requests`` places; what gives it back (calling it again does nothing).

        Raises:
            ApiError: 503, every place is taken or the server is stopping.
        """
        if self.draining:
            raise ApiError("the server is shutting down", 503, kind="server_error", error_code="shutting_down")
        if self.in_flight >= self.max_requests:
            raise ApiError(
                f"server full: it generates for {self.in_flight} requests (--max-streams {self.max_requests}); "
                "try again later",
                503,
                kind="server_error",
                error_code="server_full",
            )
        self.in_flight += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1

        return release

    # -- requests -----------------------------------------------------------------------------------
    def check(self, request: CompletionRequest | ChatRequest) -> None:
        """What is refused before a request takes a place, without tokenizing: another model,
        search options out of range (against as many new tokens as it may ask for).

        Raises:
            ApiError: 404 for another model; 400 naming a search option out of range.
        """
        self.check_model(request.sampling.model)
        self._search(request.sampling, request.sampling.max_tokens or self.context, None)

    async def start(
        self, request: CompletionRequest | ChatRequest, conversation: Conversation | None = None
    ) -> Generation:
        """Tokenize a request (once, off the event loop) and check it fits, before anything runs. In
        a ``conversation`` whose last turn (prompt and reply) starts the request's text, the prompt is
        that turn's token ids, the reply's as generated, then the rest of the text's.

        Raises:
            ApiError: as :meth:`check`; 400 for a prompt the tokenizer or template refuses, token ids
                out of the vocabulary, a prompt and ``max_tokens`` over the context length.
        """
        sampling = request.sampling
        self.check(request)
        param = "messages" if isinstance(request, ChatRequest) else "prompt"
        least = sampling.max_tokens or 1  # new tokens the context must leave room for
        text: str | None = None
        base = None  # the conversation's turn it continues
        if isinstance(request, CompletionRequest) and not isinstance(request.prompt, str):
            prompt = list(request.prompt)
        else:
            prompt, text, base = await self.prompts.of(request, conversation, least)
        room = self.context - len(prompt)
        wanted = sampling.max_tokens if sampling.max_tokens is not None else room
        if room < 1 or wanted > room:
            raise ApiError(
                f"this model's maximum context length is {self.context} tokens; the request asks for "
                f"{len(prompt) + max(wanted, 1)} ({len(prompt)} in the {param}, {max(wanted, 1)} for the completion)",
                param=param,
                error_code="context_length_exceeded",
            )
        try:
            if not prompt:
                raise GenerationError("the prompt makes no tokens")
            check_prompts([prompt], 1, vocab_size=self.batcher.vocab_size)
        except GenerationError as exc:
            raise ApiError(str(exc), param=param) from None
        search = self._search(sampling, wanted, conversation)
        generation = Generation(
            self, prompt, wanted, sampling, search, prompt_text=text, conversation=conversation, base=base
        )
        if conversation is not None:
            generation.kept = conversation.kept  # (its stream says what it reused: cached_tokens)
        if sampling.constraint.schema is not None:
            loop = asyncio.get_running_loop()
            generation.source = await loop.run_in_executor(self._grammar_threads, self._open, generation)
        return generation

    def _open(self, generation: Generation) -> Any:
        """``generation``'s stream (its grammar compiled).

        Raises:
            ApiError: 400 naming the field: a schema llguidance refuses, the structured extra
                missing, ``max_tokens`` too few for the schema's shortest answer.
        """
        try:
            return generation.open()
        except GenerationError as exc:
            raise self._refused(exc, generation.sampling) from None

    @staticmethod
    def _refused(exc: GenerationError, sampling: Sampling) -> ApiError:
        """A batcher's refusal as a 400 naming the request's field (a schema's: where it came from)."""
        if exc.field == "json_schema":
            error = schema_error(exc, sampling.constraint.param)
            return ApiError(str(error), param=error.field)
        if exc.field == "max_new_tokens":  # a schema's shortest answer is longer
            text = str(exc).replace("max_new_tokens", "max_tokens").replace("json_schema", sampling.constraint.param)
            return ApiError(text, param="max_tokens")
        return ApiError(str(exc), param=exc.field)

    def _search(self, sampling: Sampling, max_tokens: int, conversation: Conversation | None) -> dict[str, Any]:
        """The request's search keywords, checked against the batcher.

        Raises:
            ApiError: 400 naming the field out of range or that this server cannot apply.
        """
        search = sampling.search(dict(self.batcher.search_defaults))
        try:
            self.batcher.search_options(max_tokens, **search)
        except GenerationError as exc:
            raise self._refused(exc, sampling) from None
        if sampling.n > 1 and conversation is not None:
            raise ApiError(f"n must be 1 in a conversation ({HEADER}): it continues one answer", param="n")
        return search

    # -- what the server's lifecycle calls ------------------------------------------------------------
    async def drain(self, timeout: float) -> None:
        """Take no new request; wait (up to ``timeout`` seconds) for those generating to end."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def park_all(self) -> int:
        """Park every conversation in the state directory (none without one); how many were."""
        return await self.conversations.park_all()

    def release(self) -> None:
        """Close the batcher (requests still running end) and the tokenizing threads, and let go of
        the state directory (once the server has stopped)."""
        self.prompts.close()
        self._grammar_threads.shutdown(wait=False, cancel_futures=True)
        self.batcher.close()
        self.conversations.release()

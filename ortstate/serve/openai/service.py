"""What ``ortstate serve`` does for an LLM folder behind the OpenAI API: one
:class:`~ortstate.generate.ContinuousBatcher` generating for every request at once, the folder's
tokenizer and chat template around it, and how many requests it takes at once.

A request's text is decoded token by token (:class:`~ortstate.generate.IncrementalDecoder`, so
the pieces streamed add up to the decoded tokens exactly); a stop string ends the generation as
soon as the text holds it, and the text from it on is left out (as OpenAI does). While stop strings
are asked for, the text that could be the start of one is held back until it is known not to be.

A request is tokenized once, off the event loop (:mod:`.prompt_tokens`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import GenerationError
from ...generate import (
    ContinuousBatcher,
    IncrementalDecoder,
    KeptStream,
    Tokenizer,
    find_model_files,
)
from ...generate.engine import Scored
from ...generate.prompts import check_prompts
from ...generate.turns import turn_ids
from .api import ApiError, ChatRequest, CompletionRequest, Sampling
from .conversations import HEADER, Conversation, Conversations
from .prompt_tokens import PromptTokens

__all__ = ["Generation", "LlmService"]


@dataclass
class Generation:
    """One request's generation: what :meth:`LlmService.start` checked, and what it made so far.

    Attributes:
        finish: ``"stop"`` (an eos token or a stop string) or ``"length"`` once it ended, else None.
    """

    service: LlmService
    prompt: list[int]
    max_tokens: int
    sampling: Sampling
    search: dict[str, Any]
    prompt_text: str | None = None  # None: token ids
    conversation: Conversation | None = None
    kept: KeptStream | None = None  # the conversation's cache, continued
    cached: int = 0  # prompt tokens the conversation's cache held already
    tokens: list[int] = field(default_factory=list)
    scored: list[Scored] = field(default_factory=list)  # each token's logprobs, when asked for
    text: str = ""
    finish: str | None = None
    index: int = 0  # its choice (n > 1)
    _decoder: IncrementalDecoder = field(init=False, repr=False)
    _given: list[str] = field(init=False, default_factory=list)  # the text given out, piece by piece
    _tail: str = field(init=False, default="")  # the text decoded since (held back: a stop string may start)
    _pending: list[int] = field(init=False, default_factory=list)  # tokens not given out with a piece yet

    def __post_init__(self) -> None:
        self._decoder = IncrementalDecoder(self.service.tokenizer)

    async def pieces(self) -> AsyncIterator[tuple[str, list[int]]]:
        """Each new token as (the text now final, possibly "", the tokens since the last piece)."""
        logprobs, ignore_eos = self.sampling.logprobs, self.sampling.ignore_eos
        stream = self.service.batcher.stream(
            self.prompt, self.max_tokens, kept=self.kept, logprobs=logprobs, stop_at_eos=not ignore_eos, **self.search
        )
        async with contextlib.aclosing(stream):
            async for item in stream:
                yield self.take(item)
                if self.finish is not None:  # cut at a stop string
                    return
        last = self.close()
        if last is not None:
            yield last

    def take(self, item: int | Scored) -> tuple[str, list[int]]:
        """Add one token: the text now final and the tokens since the last piece. A stop string in
        the text (once more than ``min_tokens`` tokens came, as vLLM) ends it: ``finish`` is "stop"
        and the text stops before the stop string."""
        if isinstance(item, Scored):
            self.scored.append(item)
        token = item.token if isinstance(item, Scored) else item
        self.tokens.append(token)
        self._pending.append(token)
        self._tail += self._decoder.push(token)
        tail, pending = self._tail, self._pending
        cut = self._stop_in(tail)
        if cut is not None:
            self.text, self.finish = "".join(self._given) + tail[:cut], "stop"
            self._remember(cut=True)
            return tail[:cut], pending
        hold = max((len(s) for s in self.sampling.stop), default=1) - 1
        upto = max(0, len(tail) - hold)
        self._given.append(tail[:upto])
        self._tail, self._pending = tail[upto:], []
        return tail[:upto], pending

    def close(self) -> tuple[str, list[int]] | None:
        """The generation ended (not at a stop string): the text held back, if any, as the last piece."""
        tail, pending = self._tail + self._decoder.flush(), self._pending
        cut = self._stop_in(tail)
        end = len(tail) if cut is None else cut
        self.text = "".join(self._given) + tail[:end]
        stops = self.search.get("stop_token_ids") or ()
        eos = () if self.sampling.ignore_eos else self.service.batcher.eos_token_ids
        ended = cut is not None or bool(self.tokens and (self.tokens[-1] in eos or self.tokens[-1] in stops))
        self.finish = "length" if not ended and len(self.tokens) >= self.max_tokens else "stop"
        self._remember(cut=cut is not None)
        return (tail[:end], pending) if end or pending else None

    def _stop_in(self, tail: str) -> int | None:
        """Where the first stop string starts in the text not given out yet (none before ``min_tokens``)."""
        if len(self.tokens) <= self.search.get("min_tokens", 0):
            return None
        return _first_stop(tail, self.sampling.stop, 0)

    def _remember(self, cut: bool) -> None:
        """Tell the conversation what this turn was: the prompt and the reply as the client got
        it, and their token ids, an eos token that ended the reply left out (a chat template writes
        its own after the reply). A reply cut at a stop string is no start of the next turn: the
        tokens went on past its text."""
        if self.conversation is None:
            return
        self.conversation.text = None if self.prompt_text is None or cut else self.prompt_text + self.text
        self.conversation.ids = turn_ids(self.prompt, self.tokens, self.service.batcher.eos_token_ids)
        self.conversation.turns += 1  # (with a state directory: logged before the reply ends)


def _first_stop(text: str, stops: tuple[str, ...], start: int) -> int | None:
    found = [i for s in stops if (i := text.find(s, start)) >= 0]
    return min(found) if found else None


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
    ) -> None:
        self.batcher = batcher
        self.conversations = conversations or Conversations(batcher, None)
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.max_requests = max_requests
        self.context = batcher.pool.max_context
        self.created = int(time.time())
        self.in_flight = 0
        self.draining = False
        self.prompts = PromptTokens(tokenizer, self.context)

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
        state_dir: str | os.PathLike[str] | None = None,
        max_conversations: int = 1024,
        shared: bool = False,
        max_parked_bytes: int | None = None,
        conversation_ttl: float | None = None,
    ) -> LlmService:
        """Load an optimum-intel folder's decoder into a batcher of ``slots`` rows, and its tokenizer;
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
        batcher = ContinuousBatcher.from_dir(folder, slots=slots, threads=threads, kv_cache_bytes=kv_cache_bytes)
        try:
            conversations = Conversations(
                batcher, state_dir, max_conversations, shared=shared, max_bytes=max_parked_bytes, ttl=conversation_ttl
            )
        except BaseException:
            batcher.close()
            raise
        return cls(batcher, tokenizer, model_name or Path(folder).resolve().name, max_requests, conversations)

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
                f"the model '{model}' does not exist: this server serves '{self.model_id}'",
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
        if isinstance(request, CompletionRequest) and not isinstance(request.prompt, str):
            prompt = list(request.prompt)
        else:
            prompt, text = await self.prompts.of(request, conversation, least)
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
        generation = Generation(self, prompt, wanted, sampling, search, prompt_text=text, conversation=conversation)
        if conversation is not None:
            generation.kept, generation.cached = conversation.kept, conversation.kept.reuses(prompt)
        return generation

    def _search(self, sampling: Sampling, max_tokens: int, conversation: Conversation | None) -> dict[str, Any]:
        """The request's search keywords, checked against the batcher.

        Raises:
            ApiError: 400 naming the field out of range or that this server cannot apply.
        """
        search = sampling.search(dict(self.batcher.search_defaults))
        try:
            self.batcher.search_options(max_tokens, **search)
        except GenerationError as exc:
            raise ApiError(str(exc), param=exc.field) from None
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
        """Stop the batcher's and the tokenizing threads and let go of the state directory (once the
        server has stopped)."""
        self.prompts.close()
        self.batcher.close()
        self.conversations.release()

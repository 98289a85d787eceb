"""A request's prompt as token ids, for ``ortstate serve``'s OpenAI API: tokenized once per request,
in one of :data:`TOKENIZE_THREADS` threads (``tokenizers`` lets go of the GIL there, so the event
loop answers meanwhile), and a text too long to fit the context by its length alone refused before
it is tokenized (:mod:`ortstate.generate.token_bound`). A conversation's turn that goes on from its last
one (:mod:`ortstate.generate.turns`), or from the one before (a redo of the last), is that turn's
ids, then only the text it adds tokenized.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ...errors import GenerationError
from ...generate import Tokenizer
from ...generate.turns import continued_at, continued_ids
from .api import ApiError, ChatRequest, CompletionRequest
from .conversation_store import Base, Conversation

__all__ = ["TOKENIZE_THREADS", "PromptTokens"]

T = TypeVar("T")
TOKENIZE_THREADS = 2  # requests tokenized at once (more wait their turn: each holds a place already)


class PromptTokens:
    """Text prompts to token ids with ``tokenizer``, for a model of ``context`` positions."""

    def __init__(self, tokenizer: Tokenizer, context: int) -> None:
        self.tokenizer = tokenizer
        self.context = context
        self._threads = ThreadPoolExecutor(TOKENIZE_THREADS, thread_name_prefix="ortstate-tokenize")

    async def of(
        self, request: CompletionRequest | ChatRequest, conversation: Conversation | None, least: int
    ) -> tuple[list[int], str, Base | None]:
        """A text or chat request's token ids, text and the conversation's turn it continues
        (:meth:`Conversation.base`) (``least``: new tokens the context must leave room for), off the
        event loop.

        Raises:
            ApiError: 400 naming the prompt's field: the template or tokenizer refuses it, or its
                text cannot fit (``context_length_exceeded``).
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._tokenize, request, conversation, least)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` in the threads that tokenize, off the event loop (``/tokenize``, a whole
        answer shaped and rendered)."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, work, *args)

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    def _tokenize(
        self, request: CompletionRequest | ChatRequest, conversation: Conversation | None, least: int
    ) -> tuple[list[int], str, Base | None]:
        param = "messages" if isinstance(request, ChatRequest) else "prompt"
        try:
            if isinstance(request, ChatRequest):
                tools = request.sampling.constraint.tools
                text, special = self.tokenizer.apply_chat_template(request.messages, tools=tools), False
            else:
                text, special = str(request.prompt), True
            base = None if conversation is None else conversation.base(text)
            at = None if base is None else continued_at(base[0], text)
            held = 0 if base is None else len(base[1])
            fewest = self.tokenizer.fewest_tokens(text[at or 0 :], self.context - held - least)
            if fewest:
                raise self._too_long(held + fewest, least, param)
            if base is None:
                return self.tokenizer.encode(text, add_special_tokens=special), text, None
            ids = continued_ids(base[0], base[1], text, self.tokenizer)
            assert ids is not None  # continued_at found where it goes on
            return ids, text, base
        except GenerationError as exc:
            raise ApiError(str(exc), param=param) from None

    def _too_long(self, fewest: int, least: int, param: str) -> ApiError:
        bound = self.tokenizer.bound
        assert bound is not None  # fewest_tokens knows more only with one
        return ApiError(
            f"this model's maximum context length is {self.context} tokens; the request asks for at least "
            f"{fewest + least} (at least {fewest} in the {param}, by the length of its text: no token of this "
            f"model stands for more than {bound.max_bytes} bytes; {least} for the completion)",
            param=param,
            error_code="context_length_exceeded",
        )

"""A conversation kept in the decoder's cache: each turn feeds only what the chat template adds.

Every turn renders the whole conversation with the model's chat template, as transformers'
``apply_chat_template`` does. When the rendering starts with the last turn's rendering and its
reply's text, the turn's tokens are the last turn's (its prompt's, and its reply's as generated)
and then only the tokens of the text that follows (:mod:`~ortstate.generate.turns`, the rule
``ortstate serve``'s conversations follow too): the cache holds them all but the reply's last
token, so only that and the new tokens are fed (``generate(..., reset=False)``), and the reply is
what a fresh prefill of the same tokens gives (an eos token that ended the reply and that the
template does not write after it is dropped unfed). Otherwise (a template that rewrites earlier
turns, e.g. drops a reply's thinking; or a beam search, which leaves the beams in the cache) the
conversation is tokenized whole and fed again from a fresh state: :attr:`Chat.refed` counts those
turns, and :attr:`Chat.cached` says how much of each turn's prompt the cache held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import GenerationError
from .generator import Generator
from .tokenizer import Tokenizer
from .turns import continued_ids, turn_ids

__all__ = ["Chat"]


class Chat:
    """Multi-turn chat over a decoder-only :class:`Generator` (batch 1).

    Args:
        generator: its state becomes the conversation's (reset when the chat starts).
        tokenizer: a :class:`~ortstate.generate.Tokenizer` with a chat template (default: the generator's).
        system: a system message opening the conversation.

    Attributes:
        messages: the conversation so far (``role``/``content`` dicts).
        prompt_ids: the last turn's prompt as tokens: the whole conversation before its reply.
        cached: how many of them the cache held already (0 on a first or re-fed turn).
        fed: how many tokens the last turn fed before generating (the last reply's final token
            and the new ones, or the whole prompt).
        refed: turns after the first that fed the whole conversation again.

    Raises:
        GenerationError: no tokenizer (naming the file missing), or it has no chat template.
    """

    def __init__(self, generator: Generator, tokenizer: Tokenizer | None = None, *, system: str | None = None) -> None:
        tokenizer = tokenizer if tokenizer is not None else generator.tokenizer  # raises when there is none
        if not isinstance(tokenizer, Tokenizer):
            raise GenerationError("chat needs an ortstate.generate.Tokenizer (it renders the chat template)")
        tokenizer.check_chat_template()  # fail now, not at the first turn
        self.generator = generator
        self.tokenizer = tokenizer
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        self.prompt_ids: list[int] = []
        self.cached = 0
        self.fed = 0
        self.refed = 0
        self._text: str | None = None  # the last turn's rendering and its reply's text
        self._ids: list[int] = []  # their tokens (see turns.turn_ids)
        generator.reset()

    def say(
        self, text: str, max_new_tokens: int = 256, *, stream: Callable[[int], None] | None = None, **search: Any
    ) -> str:
        """Add a user turn, generate the reply (``search``: as :meth:`Generator.generate`), return its text.

        Raises:
            GenerationError, RunError: as :meth:`Generator.generate` (the conversation is unchanged).
        """
        messages = [*self.messages, {"role": "user", "content": text}]
        rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        ids = continued_ids(self._text, self._ids, rendered, self.tokenizer)
        if ids is None:
            ids = self.tokenizer.encode(rendered, add_special_tokens=False)
        held = self._held(ids)
        tokens = self.generator.generate(ids[held:], max_new_tokens, stream=stream, reset=not held, **search)
        run = self.generator.last_run
        assert run is not None
        self.fed = run.prompt_tokens  # the whole conversation when the generator could not continue
        self.cached = len(ids) - self.fed
        if self._ids and self.cached == 0:
            self.refed += 1
        reply = self.tokenizer.decode(tokens, skip_special_tokens=True)
        self.messages = [*messages, {"role": "assistant", "content": reply}]
        self.prompt_ids = ids
        self._text = rendered + reply
        self._ids = turn_ids(ids, tokens, self.generator.config.eos_token_ids)
        return reply

    def _held(self, ids: list[int]) -> int:
        """How many of ``ids`` the generator goes on from (0: none, start afresh): its history (the
        cache, then the last reply's final token, fed first); or the cache alone, that token dropped,
        when the turn does not go on with it (an eos the template does not write after the reply)."""
        held = self.generator.history[0] if self.generator.history else []
        if _starts(ids, held):
            return len(held)
        if _starts(ids, held[:-1]) and self.generator.drop_pending():  # only a generation's last token is pending
            return len(held) - 1
        return 0


def _starts(ids: list[int], head: list[int]) -> bool:
    """``head`` is a start of ``ids`` that leaves something to feed."""
    return 0 < len(head) < len(ids) and ids[: len(head)] == head

"""A conversation kept in the decoder's cache: each turn feeds only what the chat template adds.

Every turn renders the whole conversation with the model's chat template, as transformers'
``apply_chat_template`` does, and tokenizes it. When the tokens the generator already holds (the
previous turns, the last reply's final token not yet fed) are the start of that, only the rest is
fed (``generate(..., reset=False)``); when they are not (the template rewrites earlier turns, or the
reply's text tokenizes differently from the tokens generated), the conversation is fed again from a
fresh state, which gives the same answer at the cost of a longer prefill.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import GenerationError
from .generator import Generator
from .tokenizer import Tokenizer

__all__ = ["Chat"]


class Chat:
    """Multi-turn chat over a decoder-only :class:`Generator` (batch 1).

    Args:
        generator: its state becomes the conversation's (reset when the chat starts).
        tokenizer: a :class:`~ortstate.generate.Tokenizer` with a chat template (default: the generator's).
        system: a system message opening the conversation.

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
        self.refed = 0  # turns that had to feed the whole conversation again
        generator.reset()

    def say(
        self, text: str, max_new_tokens: int = 256, *, stream: Callable[[int], None] | None = None, **search: Any
    ) -> str:
        """Add a user turn, generate the reply (``search``: as :meth:`Generator.generate`), return its text.

        Raises:
            GenerationError, RunError: as :meth:`Generator.generate` (the conversation is unchanged).
        """
        messages = [*self.messages, {"role": "user", "content": text}]
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        held = self.generator.history[0] if self.generator.history else []
        continues = bool(held) and len(held) < len(ids) and ids[: len(held)] == held
        if held and not continues:
            self.refed += 1
        tokens = self.generator.generate(
            ids[len(held) :] if continues else ids, max_new_tokens, stream=stream, reset=not continues, **search
        )
        reply = self.tokenizer.decode(tokens, skip_special_tokens=True)
        self.messages = [*messages, {"role": "assistant", "content": reply}]
        return reply

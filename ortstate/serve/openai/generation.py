"""One request's generation behind the OpenAI API: its tokens decoded to text token by token
(:class:`~ortstate.generate.IncrementalDecoder`, so the pieces streamed add up to the decoded
tokens exactly); a stop string ends the generation as soon as the text holds it, and the text from
it on is left out (as OpenAI does). While stop strings are asked for, the text that could be the
start of one is held back until it is known not to be.

An answer constrained to a JSON schema is whole when it ends (:mod:`ortstate.generate.structured`
closes it within ``max_tokens``): its finish is ``"stop"`` even on its last allowed token, and a
forced tool's whole answer finishes ``"tool_calls"``.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...generate import IncrementalDecoder, KeptStream
from ...generate.scored import Scored
from ...generate.turns import turn_ids
from .api import Sampling
from .conversation_store import Base, Conversation
from .responses import Call, new_call_id

if TYPE_CHECKING:
    from .service import LlmService

__all__ = ["Generation"]

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')  # a whole JSON string


@dataclass
class Generation:
    """One request's generation: what :meth:`LlmService.start` checked, and what it made so far.

    Attributes:
        finish: ``"stop"`` (an eos token, a stop string, a whole JSON answer) or ``"length"`` once
            it ended, else None.
        source: the batcher's stream, made beforehand (:meth:`open`; None: made as it starts).
        whole: its JSON answer is whole (with a schema, once it ended not at a stop string).
    """

    service: LlmService
    prompt: list[int]
    max_tokens: int
    sampling: Sampling
    search: dict[str, Any]
    prompt_text: str | None = None  # None: token ids
    conversation: Conversation | None = None
    base: Base | None = None  # the conversation's turn its prompt continues
    kept: KeptStream | None = None  # the conversation's cache, continued
    cached: int = 0  # prompt tokens its stream held already (a conversation's, the prefix cache's)
    tokens: list[int] = field(default_factory=list)
    scored: list[Scored] = field(default_factory=list)  # each token's logprobs, when asked for
    text: str = ""
    finish: str | None = None
    index: int = 0  # its choice (n > 1)
    source: Any = None
    whole: bool = False
    call_id: str = ""  # a forced tool's call
    first_at: float | None = None  # when its first token came (time.monotonic)
    gaps: list[float] = field(default_factory=list)  # the seconds between its tokens (for /metrics)
    _decoder: IncrementalDecoder = field(init=False, repr=False)
    _sent: list[str] = field(init=False, default_factory=list)  # the text given out, piece by piece
    _tail: str = field(init=False, default="")  # the text decoded since (held back: a stop string may start)
    _pending: list[int] = field(init=False, default_factory=list)  # tokens not given out with a piece yet
    _last_at: float = field(init=False, default=0.0)  # when its last token came

    def __post_init__(self) -> None:
        self._decoder = IncrementalDecoder(self.service.tokenizer)
        if self.sampling.constraint.tool is not None:
            self.call_id = new_call_id()

    @property
    def call(self) -> Call | None:
        """The tool call the answer is: (its id, the function's name); None: a message."""
        tool = self.sampling.constraint.tool
        return None if tool is None else (self.call_id, tool)

    @property
    def finish_reason(self) -> str | None:
        """``finish`` as the answer gives it: ``"tool_calls"`` for a forced tool's whole answer."""
        return "tool_calls" if self.finish == "stop" and self.call is not None and self.whole else self.finish

    def open(self) -> Any:
        """The batcher's stream of this request (of its ``n`` choices, with ``n`` > 1); with a
        ``json_schema``, its grammar compiled (it can take long: :class:`LlmService` calls it off the
        event loop).

        Raises:
            GenerationError: an option the batcher refuses (a schema among them), naming it.
        """
        sampling, batcher = self.sampling, self.service.batcher
        common: dict[str, Any] = {"logprobs": sampling.logprobs, "stop_at_eos": not sampling.ignore_eos, **self.search}
        if sampling.n > 1:
            return batcher.stream_choices(self.prompt, self.max_tokens, **common)
        return batcher.stream(self.prompt, self.max_tokens, kept=self.kept, **common)

    async def pieces(self) -> AsyncIterator[tuple[str, list[int]]]:
        """Each new token as (the text now final, possibly "", the tokens since the last piece)."""
        stream = self.source if self.source is not None else self.open()
        async with contextlib.aclosing(stream):
            try:
                async for item in stream:
                    yield self.take(item)
                    if self.finish is not None:  # cut at a stop string
                        return
            finally:
                self.cached = stream.cached_tokens  # (set as its request started)
        last = self.close()
        if last is not None:
            yield last

    def take(self, item: int | Scored) -> tuple[str, list[int]]:
        """Add one token: the text now final and the tokens since the last piece. A stop string in
        the text (once more than ``min_tokens`` tokens came, as vLLM) ends it: ``finish`` is "stop"
        and the text stops before the stop string."""
        now = time.monotonic()
        if self.first_at is None:
            self.first_at = now
        else:
            self.gaps.append(now - self._last_at)
        self._last_at = now
        if isinstance(item, Scored):
            self.scored.append(item)
        token = item.token if isinstance(item, Scored) else item
        self.tokens.append(token)
        self._pending.append(token)
        self._tail += self._decoder.push(token)
        tail, pending = self._tail, self._pending
        cut = self._stop_in(tail)
        if cut is not None:
            self.text, self.finish = "".join(self._sent) + tail[:cut], "stop"
            self._remember(cut=True)
            return tail[:cut], pending
        hold = max((len(s) for s in self.sampling.stop), default=1) - 1
        upto = max(0, len(tail) - hold)
        self._sent.append(tail[:upto])
        self._tail, self._pending = tail[upto:], []
        return tail[:upto], pending

    def close(self) -> tuple[str, list[int]] | None:
        """The generation ended (not at a stop string): the text held back, if any, as the last piece."""
        tail, pending = self._tail + self._decoder.flush(), self._pending
        cut = self._stop_in(tail)
        end = len(tail) if cut is None else cut
        self.text = "".join(self._sent) + tail[:end]
        stops = self.search.get("stop_token_ids") or ()
        eos = () if self.sampling.ignore_eos else self.service.batcher.eos_token_ids
        ended = cut is not None or bool(self.tokens and (self.tokens[-1] in eos or self.tokens[-1] in stops))
        self.whole = cut is None and "json_schema" in self.search and _parses(self.text)
        self.finish = "length" if not ended and not self.whole and len(self.tokens) >= self.max_tokens else "stop"
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
        self.conversation.before = self.base or (None, [])  # what a redo of this turn continues
        self.conversation.turns += 1  # (with a state directory: logged before the reply ends)


def _parses(text: str) -> bool:
    """``text`` is a JSON value (the answer, kept to its schema by the grammar, is whole)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    except RecursionError:  # nested deeper than the parser goes: whole once every bracket is closed
        rest = _STRING.sub("", text)
        return '"' not in rest and rest.count("[") + rest.count("{") == rest.count("]") + rest.count("}")
    return True


def _first_stop(text: str, stops: tuple[str, ...], start: int) -> int | None:
    found = [i for s in stops if (i := text.find(s, start)) >= 0]
    return min(found) if found else None

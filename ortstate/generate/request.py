"""One generation as the engine (:mod:`.engine`) runs it: its prompt, limits, search and where its
tokens go, and how far it got."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .options import SearchOptions
from .sampler import RowState
from .schedule import Progress
from .scored import Scored
from .stopping import StopCriteria
from .structured import Matcher

__all__ = ["END", "Request"]

END = object()  # a sink's last item: the request ended


@dataclass
class Request:
    """One generation: its prompt, limits, search, and where its tokens go (``sink``: each token,
    then an error or :data:`END`; called from the engine's thread, a tick's items at a time, then
    ``notify`` once, where given, for all the requests that share it)."""

    prompt: list[int]
    max_new_tokens: int
    options: SearchOptions
    criteria: StopCriteria
    sink: Callable[[Any], None]
    rng: np.random.Generator | None = None
    notify: Callable[[], None] | None = None  # called once after a batch of items went to the sinks
    streamed: bool = True  # False: the sink gets only the end (an error or END), not each token
    rid: int = -1
    sid: int | None = None  # given: a kept stream whose cache holds ``fed`` of the prompt's tokens
    fed: int = 0  # prompt tokens fed
    next_token: int | None = None
    tokens: list[int] = field(default_factory=list)
    keep: bool = False  # the stream ``sid`` stays open when the request ends
    reset_first: bool = False  # the kept stream is emptied before the prompt is fed
    on_end: Callable[[Request], None] | None = None  # called from the engine's thread as it ends
    logprobs: int | None = None  # given: each token goes to the sink as a Scored with that many top tokens
    scored: Scored | None = None  # the last token picked, scored (with ``logprobs``)
    progress: Progress | None = None  # what schedule() reads; None: it moved since (made again)
    # the other choices of an n > 1 request: they start on copies of this one's stream once its
    # prompt is fed (KvPool.fork), and run as requests of their own from then on
    siblings: list[Request] = field(default_factory=list)
    matcher: Matcher | None = None  # its place in its json_schema's grammar (None: no schema)
    stops: frozenset[int] | None = field(init=False)  # the tokens that stop it (None: stop strings)
    row: RowState = field(init=False)  # what its picks depend on (options, generator, its tokens)
    plain: bool = field(init=False)  # greedy, nothing adjusted, no logprobs or schema: its logits' argmax

    def __post_init__(self) -> None:
        self.stops = None if self.criteria.strings else self.criteria.token_ids
        self.row = RowState.start(self.options, self.prompt, self.criteria.token_ids, self.rng, output=self.tokens)
        self.plain = (
            not self.options.do_sample and not self.options.adjusts and self.logprobs is None and self.matcher is None
        )

    @property
    def rows(self) -> int:
        """The pool's rows it takes: its own and its siblings' (once forked)."""
        return 1 + len(self.siblings)

    @property
    def reach(self) -> int:
        return (len(self.prompt) + self.max_new_tokens) * self.rows

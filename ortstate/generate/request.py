"""One generation as :class:`~.continuous.ContinuousBatcher` hands it to its engine: complete when
built (its prompt, limits, search, where its tokens go, the kept stream it continues, its other
choices); nothing sets a field of it afterwards. What it becomes while it runs (its stream, its
next token, its picking state) is the executor's (:mod:`.executor`); how far its prompt is fed, the
scheduler's (:mod:`ortstate.scheduler.requests`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .options import SearchOptions
from .stopping import StopCriteria
from .structured import Matcher

if TYPE_CHECKING:
    from .kept import KeptStream

__all__ = ["END", "Request"]

END = object()  # a sink's last item: the request ended


@dataclass(frozen=True, eq=False)
class Request:
    """One generation (one choice of a request of several).

    Attributes:
        rid: its id (the batcher's, unique).
        sink: takes each token (a :class:`~.scored.Scored` with ``logprobs``), then an error or
            :data:`END`; called from the pool's loop, a tick's items at a time, then ``notify``
            once, where given, for all the requests that share it.
        streamed: False: the sink gets only the end (an error or :data:`END`), not each token.
        rng: its random generator (None: greedy, or seeded by its options).
        kept: the kept stream it continues (the stream stays open when it ends), whose cache holds
            ``reused`` of its prompt's tokens already (0: it is emptied first).
        siblings: its other choices: they start on copies of its stream once its prompt is fed,
            and run as requests of their own from then on.
        tokens: its new tokens, as they are picked (the engine appends to this list).
        matcher: where its answer is in its ``json_schema``'s grammar (the executor advances it).
        started: called (in the pool's loop) with how many of its prompt's tokens its stream held
            when it started, before its first token: a kept stream's (``reused``) or a cached
            prefix's (see :mod:`ortstate.scheduler.requests`); a first choice's only.
    """

    rid: int
    prompt: list[int]
    max_new_tokens: int
    options: SearchOptions
    criteria: StopCriteria
    sink: Callable[[Any], None]
    notify: Callable[[], None] | None = None
    streamed: bool = True
    rng: np.random.Generator | None = None
    logprobs: int | None = None
    kept: KeptStream | None = None
    reused: int = 0
    siblings: tuple[Request, ...] = ()
    tokens: list[int] = field(default_factory=list)
    matcher: Matcher | None = None  # its place in its json_schema's grammar (None: no schema)
    started: Callable[[int], None] | None = None
    stops: frozenset[int] | None = field(init=False)  # the tokens that stop it (None: stop strings)
    plain: bool = field(init=False)  # greedy, nothing adjusted, no logprobs or schema: its logits' argmax

    def __post_init__(self) -> None:
        object.__setattr__(self, "stops", None if self.criteria.strings else self.criteria.token_ids)
        options = self.options
        plain = not options.do_sample and not options.adjusts and self.logprobs is None and self.matcher is None
        object.__setattr__(self, "plain", plain)

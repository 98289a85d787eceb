"""Generation requests tick by tick, as vLLM's scheduler and OpenVINO GenAI's decide them: who runs,
with how many tokens, from the requests' progress alone.

A request waits until it is *admitted*: when the pool has its rows (one a choice) and the positions
it can reach (prompt plus ``max_new_tokens``, times its choices) fit in the KV budget beside those
of the requests running, so a tick never needs more KV memory than the budget; the first request
waiting is admitted when nothing runs, whatever it reaches. Requests wait in order: one that does
not fit holds back the ones after it.

Each tick, every running request whose prompt is fed decodes one token (one batched run in the
pool), and the prompts still to feed get chunks of at most ``max_num_batched_tokens`` tokens in all,
oldest first, so a long prompt is fed over several ticks and never holds the decoding requests back
by more than one chunk. A model whose prompt must go in one run gets its whole prompt in one
chunk, one such prompt per tick past the budget; one whose state takes one token a run once it
holds a past (the mamba family's decode path) gets one token a tick past its first chunk.

A request of several choices feeds its prompt once, as its first choice; the tick its last chunk
runs, its other choices start on copies of that stream (``forks``) and decode from the next tick
on, each a request of its own.

With ``prefix_cache`` (automatic prefix caching, as SGLang's RadixAttention and vLLM's), the
streams of requests that ended stay in the pool as a cache (:meth:`Scheduler.cache`), and every
request admitted starts from the longest start of its prompt that a stream holds, running or
cached (:class:`~.prefix_tree.PrefixTree`): its stream gets a copy of those positions (or the
cached stream itself, cut to them, when the request extends all it holds or the budget needs the
room) and only the rest of its prompt is fed; a whole prompt held still feeds its last token (its
logits). A request whose prompt a running request is still feeding waits until that one holds it.
The cache is evicted least recently used first, so that the cached streams and the running
requests' rows and reach fit the pool's rows and KV budget; a running request's stream never is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..errors import OrtStateError
from .prefix_tree import Match, PrefixTree

__all__ = ["Limits", "Plan", "Scheduler"]


@dataclass(frozen=True)
class Limits:
    """What a scheduler admits and feeds against: the pool's ``rows``, its KV budget in
    ``positions`` (:class:`~.budget.KvBudget`), prompt tokens fed per tick; ``chunked``: a prompt
    may be split; ``stepwise``: a request past its first chunk feeds one token a tick;
    ``prefix_cache``: requests start from the longest start of their prompt a stream holds."""

    rows: int
    positions: int
    max_num_batched_tokens: int
    chunked: bool = True
    stepwise: bool = False
    prefix_cache: bool = False

    def __post_init__(self) -> None:
        for name in ("rows", "positions", "max_num_batched_tokens"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise OrtStateError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class Plan:
    """One tick: the requests admitted now (``admit``: their streams open before anything runs), those
    decoding one token, the prompt ``chunks`` fed (``(request, first token, tokens)``), and the
    ``forks``: ``(request, its other choices)``, started on copies of its stream once its chunk ran;
    with a prefix cache, the cached streams to close first (``evict``, by their keys) and the
    admitted requests' ``prefixes``: ``(request, the key of the stream holding it, its length,
    moved)``, moved: the request takes that cached stream itself, cut to the length (else a copy)."""

    admit: tuple[int, ...] = ()
    decode: tuple[int, ...] = ()
    chunks: tuple[tuple[int, int, int], ...] = ()
    forks: tuple[tuple[int, tuple[int, ...]], ...] = ()
    evict: tuple[Hashable, ...] = ()
    prefixes: tuple[tuple[int, Hashable, int, bool], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.admit or self.decode or self.chunks)


class _Request:
    """A request as the scheduler keeps it: its prompt's length, how much of it is fed, its limit,
    and its other choices (until they fork)."""

    __slots__ = ("choices", "fed", "ids", "max_new_tokens", "prompt", "rid")

    def __init__(
        self, rid: int, prompt: int, fed: int, max_new_tokens: int, choices: list[int], ids: tuple[int, ...] | None
    ) -> None:
        self.rid, self.prompt, self.fed, self.max_new_tokens, self.choices = rid, prompt, fed, max_new_tokens, choices
        self.ids = ids  # its prompt's token ids, matched against the prefix cache (None: not matched)

    @property
    def rows(self) -> int:
        return 1 + len(self.choices)

    @property
    def reach(self) -> int:
        return (self.prompt + self.max_new_tokens) * self.rows


class Scheduler:
    """The requests waiting and running on one pool (see the module docstring)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._waiting: deque[_Request] = deque()
        self._running: dict[int, _Request] = {}  # oldest first
        self._first: dict[int, _Request] = {}  # a choice not forked yet -> its request
        self._rows = 0  # the running requests' rows
        self._reach = 0  # and the positions they can reach
        self._feeding = 0  # running requests with prompt tokens to feed
        self._steady: Plan | None = None  # the plan while nothing changes: every request decoding
        # the streams by what they hold: running requests' (by their id, pinned) and the cache's
        self.prefixes = PrefixTree() if limits.prefix_cache else None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    def running_ids(self) -> tuple[int, ...]:
        """The running requests, oldest first (choices that started from one included)."""
        return tuple(self._running)

    def add(
        self,
        rid: int,
        prompt: int,
        max_new_tokens: int,
        fed: int = 0,
        choices: Sequence[int] = (),
        ids: Sequence[int] | None = None,
    ) -> None:
        """Queue request ``rid``: ``prompt`` tokens of which its stream holds ``fed`` already (a kept
        stream's), up to ``max_new_tokens`` new ones; ``choices``: the ids of its other choices;
        ``ids``: its prompt's token ids, to start from the prefix cache (None: it does not).

        Raises:
            OrtStateError: nothing left to feed, or a count that is not a positive integer.
        """
        if not 0 <= fed < prompt or max_new_tokens < 1 or (ids is not None and (fed or len(ids) != prompt)):
            raise OrtStateError(f"request {rid}: {prompt} prompt tokens, {fed} fed, {max_new_tokens} new: none to run")
        matched = None if ids is None or self.prefixes is None else tuple(ids)
        request = _Request(rid, prompt, fed, max_new_tokens, list(choices), matched)
        self._waiting.append(request)
        for choice in choices:
            self._first[choice] = request

    def end(self, rid: int) -> tuple[int, ...]:
        """Request ``rid`` ends (it stopped, failed or was cancelled); the requests that end with it:
        itself, and its choices not forked yet (none: ``rid`` is unknown, or ended already)."""
        choice_of = self._first.pop(rid, None)
        if choice_of is not None:  # a choice that never started: its request takes one row less
            running = choice_of.rid in self._running
            if running:
                self._rows, self._reach = self._rows - choice_of.rows, self._reach - choice_of.reach
            choice_of.choices.remove(rid)
            if running:
                self._rows, self._reach = self._rows + choice_of.rows, self._reach + choice_of.reach
            return (rid,)
        request = self._running.pop(rid, None)
        if request is not None:
            if self.prefixes is not None:
                self.prefixes.remove(rid)
            self._rows, self._reach = self._rows - request.rows, self._reach - request.reach
            self._feeding -= request.fed < request.prompt
            self._steady = None
        else:
            request = next((r for r in self._waiting if r.rid == rid), None)
            if request is None:
                return ()
            self._waiting.remove(request)
        for choice in request.choices:
            del self._first[choice]
        return (rid, *request.choices)

    def schedule(self) -> Plan:
        """The next tick (see the module docstring); it counts the chunks it plans as fed."""
        if not self._waiting and not self._feeding:  # the steady state: every request decodes
            if self._steady is None:
                self._steady = Plan(decode=tuple(self._running))
            return self._steady
        self._steady = None
        admit, evict, prefixes = self._admit()
        decode, chunks, forks = [], [], []
        budget, feeding = self.limits.max_num_batched_tokens, True
        for request in list(self._running.values()):
            if request.fed >= request.prompt:
                decode.append(request.rid)
                continue
            take = self._take(request, budget, bool(chunks)) if feeding else 0
            if not take:  # the prompts after it wait too: they are fed in order
                feeding = False
                continue
            chunks.append((request.rid, request.fed, take))
            budget -= take
            request.fed += take
            if request.ids is not None:
                self.prefixes.hold(request.rid, request.fed)  # type: ignore[union-attr]
            if request.fed == request.prompt:
                self._feeding -= 1
                if request.choices:
                    forks.append((request.rid, self._fork(request)))
        return Plan(tuple(admit), tuple(decode), tuple(chunks), tuple(forks), tuple(evict), tuple(prefixes))

    def cache(self, key: Hashable, ids: Sequence[int]) -> tuple[Hashable, ...]:
        """A stream that holds ``ids`` (a request's that ended) is the cache's from now on, as ``key``;
        the cached streams to close now (``key`` among them when it holds nothing new, or no room
        is left for it). Without a prefix cache: ``(key,)``."""
        if self.prefixes is None:
            return (key,)
        gone = list(self.prefixes.insert(key, ids))
        self._evict(gone, set())
        return tuple(gone)

    def forget(self, key: Hashable) -> None:
        """The cached stream ``key`` is gone (closed by the caller)."""
        if self.prefixes is not None:
            self.prefixes.remove(key)

    def _admit(self) -> tuple[list[int], list[Hashable], list[tuple[int, Hashable, int, bool]]]:
        """The requests admitted now, the cached streams they evict, and where their prompts start."""
        limits, admitted, evicted, prefixes = self.limits, [], [], []
        copied: set[Hashable] = set()  # streams copied this tick: closed after, never before
        while self._waiting:
            request = self._waiting[0]
            match = self._match(request)
            if self._running and match.longest > match.length:
                break  # a running request still feeding holds more of it soon: wait for it
            full = self._rows + request.rows > limits.rows or self._reach + request.reach > limits.positions
            if self._running and full:
                break
            self._waiting.popleft()
            self._running[request.rid] = request
            self._rows, self._reach = self._rows + request.rows, self._reach + request.reach
            self._feeding += 1
            admitted.append(request.rid)
            if request.ids is not None:
                prefix = self._start(request, match, copied, evicted)
                if prefix is not None:
                    prefixes.append(prefix)
        return admitted, evicted, prefixes

    def _match(self, request: _Request) -> Match:
        """The longest start of ``request``'s prompt held, short of its last token (fed for its logits)."""
        if request.ids is None or self.prefixes is None:
            return Match(None, 0, 0)
        found = self.prefixes.match(request.ids)
        last = request.prompt - 1
        return Match(found.key, min(found.length, last), min(found.longest, last))

    def _start(
        self, request: _Request, match: Match, copied: set[Hashable], evicted: list[Hashable]
    ) -> tuple[int, Hashable, int, bool] | None:
        """``request`` admitted: the cache evicted to make room (its match last), its prompt's start."""
        tree = self.prefixes
        assert tree is not None
        source, length = match.key, match.length
        keep = set(copied) if source is None else {*copied, source}
        room = self._evict(evicted, keep)
        cached = source is not None and length > 0 and not tree.pinned(source)
        moved = cached and (not room or tree.held(source) == length)  # no copy: the stream itself, cut
        if moved:
            tree.remove(source)
        elif source is not None and length:
            copied.add(source)
        request.fed = length
        tree.insert(request.rid, request.ids or (), length, pins=1)
        return (request.rid, source, length, moved) if source is not None and length else None

    def _evict(self, evicted: list[Hashable], keep: set[Hashable]) -> bool:
        """Evict cached streams not in ``keep``, least recently used first, until the cache and the
        running requests' rows and reach fit the limits; whether they do."""
        tree, limits = self.prefixes, self.limits
        assert tree is not None

        def fits() -> bool:
            rows, positions = tree.cached + self._rows, tree.cached_positions + self._reach
            return rows <= limits.rows and positions <= limits.positions

        for key in [] if fits() else list(tree.victims()):
            if key not in keep:
                tree.remove(key)
                evicted.append(key)
                if fits():
                    break
        return fits()

    def _take(self, request: _Request, budget: int, others: bool) -> int:
        """The prompt tokens ``request`` feeds this tick, ``budget`` left (``others``: chunks planned)."""
        left = request.prompt - request.fed
        if budget <= 0:
            return 0
        if self.limits.stepwise and request.fed:
            return 1
        if self.limits.chunked:
            return min(left, budget)
        return 0 if others and left > budget else left

    def _fork(self, request: _Request) -> tuple[int, ...]:
        """``request``'s other choices, running on their own from now (after every request)."""
        choices, request.choices = tuple(request.choices), []
        for rid in choices:
            del self._first[rid]
            self._running[rid] = _Request(rid, request.prompt, request.prompt, request.max_new_tokens, [], None)
        return choices

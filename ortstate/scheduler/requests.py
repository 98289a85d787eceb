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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import OrtStateError

__all__ = ["Limits", "Plan", "Scheduler"]


@dataclass(frozen=True)
class Limits:
    """What a scheduler admits and feeds against: the pool's ``rows``, its KV budget in
    ``positions`` (:class:`~.budget.KvBudget`), prompt tokens fed per tick; ``chunked``: a prompt
    may be split; ``stepwise``: a request past its first chunk feeds one token a tick."""

    rows: int
    positions: int
    max_num_batched_tokens: int
    chunked: bool = True
    stepwise: bool = False

    def __post_init__(self) -> None:
        for name in ("rows", "positions", "max_num_batched_tokens"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise OrtStateError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class Plan:
    """One tick: the requests admitted now (``admit``: their streams open before anything runs), those
    decoding one token, the prompt ``chunks`` fed (``(request, first token, tokens)``), and the
    ``forks``: ``(request, its other choices)``, started on copies of its stream once its chunk ran."""

    admit: tuple[int, ...] = ()
    decode: tuple[int, ...] = ()
    chunks: tuple[tuple[int, int, int], ...] = ()
    forks: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.admit or self.decode or self.chunks)


class _Request:
    """A request as the scheduler keeps it: its prompt's length, how much of it is fed, its limit,
    and its other choices (until they fork)."""

    __slots__ = ("choices", "fed", "max_new_tokens", "prompt", "rid")

    def __init__(self, rid: int, prompt: int, fed: int, max_new_tokens: int, choices: list[int]) -> None:
        self.rid, self.prompt, self.fed, self.max_new_tokens, self.choices = rid, prompt, fed, max_new_tokens, choices

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

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    def running_ids(self) -> tuple[int, ...]:
        """The running requests, oldest first (choices that started from one included)."""
        return tuple(self._running)

    def add(self, rid: int, prompt: int, max_new_tokens: int, fed: int = 0, choices: Sequence[int] = ()) -> None:
        """Queue request ``rid``: ``prompt`` tokens of which its stream holds ``fed`` already (a kept
        stream's), up to ``max_new_tokens`` new ones; ``choices``: the ids of its other choices.

        Raises:
            OrtStateError: nothing left to feed, or a count that is not a positive integer.
        """
        if not 0 <= fed < prompt or max_new_tokens < 1:
            raise OrtStateError(f"request {rid}: {prompt} prompt tokens, {fed} fed, {max_new_tokens} new: none to run")
        request = _Request(rid, prompt, fed, max_new_tokens, list(choices))
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
        admit = self._admit()
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
            if request.fed == request.prompt:
                self._feeding -= 1
                if request.choices:
                    forks.append((request.rid, self._fork(request)))
        return Plan(tuple(admit), tuple(decode), tuple(chunks), tuple(forks))

    def _admit(self) -> list[int]:
        limits, admitted = self.limits, []
        while self._waiting:
            request = self._waiting[0]
            full = self._rows + request.rows > limits.rows or self._reach + request.reach > limits.positions
            if self._running and full:
                break
            self._waiting.popleft()
            self._running[request.rid] = request
            self._rows, self._reach = self._rows + request.rows, self._reach + request.reach
            self._feeding += 1
            admitted.append(request.rid)
        return admitted

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
            self._running[rid] = _Request(rid, request.prompt, request.prompt, request.max_new_tokens, [])
        return choices

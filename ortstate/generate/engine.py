"""The loop that owns a KV stream pool and generates for many requests at once.

vLLM's split: requests come in through a queue; each tick, :func:`~.schedule.schedule` decides
from the requests' progress alone what runs; the pool runs it (one batched run for every request
decoding, a run per prompt chunk); then each request whose run ended its prompt or decoded picks
its next token (its own search options and random generator, as a lone
:class:`~ortstate.generate.Generator` picks it) and hands it to the request's sink. The loop runs
in a thread of its own: nothing that waits on an event loop holds a lock across an ONNX Runtime
run.

A request may continue a stream kept open between requests (a conversation): its cache already
holds the start of the prompt, so only the rest is fed; the stream stays open when it ends.

A request is admitted when the pool has a row for it and the positions it can reach (prompt plus
``max_new_tokens``) fit beside those of the requests already running, so a step never needs more
KV memory than ``kv_cache_bytes``; the others wait in order.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..decoders import FeedRules
from ..errors import OrtStateError, RunError
from ..streams.kv_pool import KvPool
from .logits_process import process, sample
from .options import SearchOptions
from .schedule import Progress, schedule
from .stopping import StopCriteria

__all__ = ["END", "Engine", "Request"]

END = object()  # a sink's last item: the request ended


@dataclass
class Request:
    """One generation: its prompt, limits, search, and where its tokens go (``sink``: each token,
    then an error or :data:`END`; called from the engine's thread)."""

    prompt: list[int]
    max_new_tokens: int
    options: SearchOptions
    criteria: StopCriteria
    sink: Callable[[Any], None]
    rng: np.random.Generator | None = None
    rid: int = -1
    sid: int | None = None  # given: a kept stream whose cache holds ``fed`` of the prompt's tokens
    fed: int = 0  # prompt tokens fed
    next_token: int | None = None
    tokens: list[int] = field(default_factory=list)
    keep: bool = False  # the stream ``sid`` stays open when the request ends
    reset_first: bool = False  # the kept stream is emptied before the prompt is fed
    on_end: Callable[[Request], None] | None = None  # called from the engine's thread as it ends

    @property
    def plain(self) -> bool:
        return not self.options.do_sample and self.options.repetition_penalty == 1.0

    @property
    def reach(self) -> int:
        return len(self.prompt) + self.max_new_tokens


class Engine:
    """Generates for the requests :meth:`submit` hands it, on ``pool``, fed by ``rules``."""

    def __init__(self, pool: KvPool, rules: FeedRules, max_num_batched_tokens: int) -> None:
        self.pool, self.rules = pool, rules
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked = pool.batching == "ragged" and rules.cache_position != "conv_kernel"
        # A decoder whose recurrent state reads one token per run once it holds a past (the mamba
        # family's decode path; transformers feeds it so): a kept stream's new tokens go one a tick.
        self.stepwise = rules.mask == "current" or rules.cache_position == "conv_kernel"
        self.positions = pool.kv_cache_bytes // pool.token_bytes
        self._waiting: deque[Request] = deque()
        self._running: dict[int, Request] = {}
        self._cancelled: set[int] = set()
        self._next = 0
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.ticks = 0

    def submit(self, request: Request) -> int:
        """Queue ``request``; returns its id."""
        with self._wake:
            if self._stop:
                raise OrtStateError("the batcher is closed")
            request.rid, self._next = self._next, self._next + 1
            self._waiting.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="ortstate-batcher", daemon=True)
                self._thread.start()
            self._wake.notify()
            return request.rid

    def cancel(self, rid: int) -> None:
        """End request ``rid`` at the next tick (its sink gets :data:`END`)."""
        with self._wake:
            self._cancelled.add(rid)
            self._wake.notify()

    def close(self) -> None:
        """Stop the loop; requests still running end with an error."""
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()

    # -- the loop ---------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stop and not self._waiting and not self._running:
                    self._wake.wait()
                if self._stop:
                    break
                cancelled, self._cancelled = self._cancelled, set()
            try:
                self._drop(cancelled)
                self._admit()
                self._tick()
            except Exception as exc:  # noqa: BLE001 - every running request gets it; the loop goes on
                for request in list(self._running.values()):
                    self._end(request, exc if isinstance(exc, OrtStateError) else RunError(f"generation failed: {exc}"))
        error = OrtStateError("the batcher was closed")
        for request in [*self._running.values(), *self._waiting]:
            self._end(request, error)
        self._waiting.clear()

    def _drop(self, cancelled: set[int]) -> None:
        for request in [r for r in self._running.values() if r.rid in cancelled]:
            self._end(request, END)
        with self._wake:
            gone = [r for r in self._waiting if r.rid in cancelled]
            self._waiting = deque(r for r in self._waiting if r.rid not in cancelled)
        for request in gone:
            self._end(request, END)

    def _admit(self) -> None:
        reach = sum(r.reach for r in self._running.values())
        while True:
            with self._wake:
                if not self._waiting:
                    return
                request = self._waiting[0]
                if self._running and (len(self._running) >= self.pool.slots or reach + request.reach > self.positions):
                    return
                self._waiting.popleft()
            try:
                if request.sid is None:
                    request.sid = self.pool.open()
                elif request.reset_first:
                    self.pool.reset(request.sid)
            except OrtStateError as exc:
                self._end(request, exc)
                continue
            self._running[request.rid] = request
            reach += request.reach

    def _tick(self) -> None:
        running = self._running
        progress = [Progress(r.rid, len(r.prompt) - r.fed, r.next_token is not None) for r in running.values()]
        tick = schedule(progress, self.max_num_batched_tokens, self.chunked)
        if tick.empty:
            return
        feeds: dict[int, dict[str, np.ndarray]] = {}
        widths: dict[int, int] = {}
        for rid in tick.decode:
            r = running[rid]
            feeds[r.sid] = self.rules.feeds(np.array([[r.next_token]], np.int64), len(r.prompt) + len(r.tokens) - 1)
            widths[rid] = 1
        for rid, count in tick.chunks:
            r = running[rid]
            count = 1 if self.stepwise and r.fed else count
            ids = np.array([r.prompt[r.fed : r.fed + count]], np.int64)
            feeds[r.sid] = self.rules.feeds(ids, r.fed)
            widths[rid] = count
        results = self.pool.step(feeds, errors="return", logits="last")
        self.ticks += 1
        for rid in widths:
            r = running[rid]
            out = results[r.sid]
            if isinstance(out, BaseException):
                self._end(r, out)
                continue
            if r.next_token is None:
                r.fed += widths[rid]
                if r.fed < len(r.prompt):
                    continue
            self._pick(r, out["logits"][:, -1])

    def _pick(self, r: Request, logits: np.ndarray) -> None:
        if r.plain:  # greedy, no penalty: process() would hand the scores back as they are
            token = int(logits.argmax())
        else:
            scores = process(logits, [r.prompt + r.tokens], r.options)
            token = int(sample(scores, r.rng)[0] if r.rng is not None else np.argmax(scores, axis=-1)[0])
        r.tokens.append(token)
        _send(r, token)
        why = r.criteria.reason(r.tokens)
        if why or len(r.tokens) >= r.max_new_tokens:
            self._end(r, END)
        else:
            r.next_token = token

    def _end(self, request: Request, last: Any) -> None:
        if self._running.pop(request.rid, None) is not None and request.sid is not None and not request.keep:
            self.pool.close(request.sid)
        if request.on_end is not None:
            try:
                request.on_end(request)
            except Exception:  # noqa: BLE001 - its owner's problem, never the other requests'
                pass
        _send(request, last)


def _send(request: Request, item: Any) -> None:
    """Hand ``item`` to the request's sink; a sink that fails is its own consumer's problem, never
    the other requests'."""
    try:
        request.sink(item)
    except Exception:  # noqa: BLE001
        pass

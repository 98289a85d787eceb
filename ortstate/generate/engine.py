"""The loop that owns a KV stream pool and generates for many requests at once.

vLLM's split: requests come in through a queue; each tick, :func:`~.schedule.schedule` decides
from the requests' progress alone what runs; the pool runs it (one batched run for every request
decoding, a run per prompt chunk); then each request whose run ended its prompt or decoded picks
its next token (its own search options and random generator, as a lone
:class:`~ortstate.generate.Generator` picks it; a ``json_schema``'s rows from logits their
grammars masked, all of the tick's in one call, and a row stops once its answer is complete) and
hands it to the request's sink. The engine runs in the thread that owns the pool
(:class:`~ortstate.streams.loop.PoolLoop`, whose worker it is), one tick at a time while it has
requests: the pool's other work (``pool.call`` commands such as opening, saving or loading a kept
stream; ``pool.submit`` steps) runs between two ticks, so nothing that waits on an event loop holds
a lock across an ONNX Runtime run.

A request is admitted when the pool has a row for it and the positions it can reach (prompt plus
``max_new_tokens``) fit beside those of the requests already running, so a step never needs more
KV memory than ``kv_cache_bytes``; the others wait in order.

A request may continue a stream kept open between requests (a conversation): its cache already
holds the start of the prompt, so only the rest is fed; the stream stays open when it ends.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..decoders import FeedRules
from ..errors import OrtStateError, RunError
from ..streams.kv_pool import KvPool
from .request import END, Request
from .sampler import choose
from .schedule import Progress, schedule
from .scored import Scored
from .structured import advance, mask_logits

__all__ = ["END", "Engine", "Request", "Scored"]


class Engine:
    """Generates for the requests :meth:`submit` hands it, on ``pool``, fed by ``rules``."""

    def __init__(self, pool: KvPool, rules: FeedRules, max_num_batched_tokens: int) -> None:
        self.pool, self.rules = pool, rules
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked = pool.batching == "ragged" and rules.cache_position != "conv_kernel"
        # A decoder whose recurrent state reads one token per run once it holds a past (the mamba
        # family's decode path; transformers feeds it so): a kept stream's new tokens go one a tick.
        self.stepwise = rules.mask == "current" or rules.cache_position == "conv_kernel"
        # decoding requests go to the pool as one batch (KvPool.decode) unless a row's feeds hold a
        # value every row of a run shares (cache_position: one per cache length)
        self.batched = "cache_position" not in rules.names
        self.positions = pool.kv_cache_bytes // pool.token_bytes
        self._waiting: deque[Request] = deque()
        self._running: dict[int, Request] = {}
        self._cancelled: set[int] = set()
        self._next = 0
        self._lock = threading.Lock()  # the queues the callers' threads touch
        self._stop = False
        self._closed = threading.Event()
        self._outgoing: list[tuple[Request, Any]] = []  # (request, item) for the sinks, see _flush
        self.ticks = 0
        self.loop = pool.loop
        self.loop.attach(self)

    def submit(self, request: Request) -> int:
        """Queue ``request``; returns its id."""
        with self._lock:
            if self._stop:
                raise OrtStateError("the batcher is closed")
            for r in (request, *request.siblings):
                r.rid, self._next = self._next, self._next + 1
            self._waiting.append(request)
        self.loop.wake()
        return request.rid

    def cancel(self, rid: int) -> None:
        """End request ``rid`` at the next tick (its sink gets :data:`END`)."""
        with self._lock:
            self._cancelled.add(rid)
        self.loop.wake()

    def close(self) -> None:
        """Stop generating; requests still running or waiting end with an error."""
        with self._lock:
            self._stop = True
        if self.loop.in_thread():  # from a sink or a command: at once
            self._shutdown()
        else:
            self.loop.wake()
            self._closed.wait()
        self.loop.detach(self)

    # -- the worker (PoolLoop's thread) -----------------------------------------------------------
    def pending(self) -> bool:
        return bool(self._waiting or self._running or self._cancelled or self._outgoing) or (
            self._stop and not self._closed.is_set()
        )

    def run(self) -> None:
        """One tick: drop what was cancelled, admit what fits, run the tick's runs; the last tick's
        tokens go to their sinks before the runs (see :meth:`_flush`), or now when nothing runs."""
        if self._stop:
            self._shutdown()
            return
        with self._lock:
            cancelled, self._cancelled = self._cancelled, set()
        try:
            self._drop(cancelled)
            self._admit()
            self._tick()
        except Exception as exc:  # noqa: BLE001 - every running request gets it; the loop goes on
            for request in list(self._running.values()):
                self._end(request, exc if isinstance(exc, OrtStateError) else RunError(f"generation failed: {exc}"))
        if not self._running:
            self._flush()  # nothing runs next: hand over what the last tick made now

    def _shutdown(self) -> None:
        if self._closed.is_set():
            return
        error = OrtStateError("the batcher was closed")
        with self._lock:
            waiting, self._waiting = list(self._waiting), deque()
        for request in [*self._running.values(), *waiting]:
            self._end(request, error)
        self._flush()
        self._closed.set()

    def _flush(self) -> None:
        """Hand the items of the last tick to their sinks. The pool calls it (``before_run``) once
        the next run's inputs are bound, as the last Python before the run (or the engine, when
        nothing runs next): a sink that wakes another thread (``stream()``'s event loop) wakes it
        as ONNX Runtime lets go of the GIL, so that thread's work overlaps the run. Woken earlier,
        while this thread still builds and binds the run's feeds, the two take turns at the GIL and
        a tick costs both (tiny llama, 64 ``stream()`` consumers: 8.8x one stream at a time when
        woken before the pool's checks and binding, 10.3-10.9x as the last thing)."""
        items, self._outgoing = self._outgoing, []
        notify: set[Callable[[], None]] = set()
        last = None
        for request, item in items:
            try:
                request.sink(item)
            except Exception:  # noqa: BLE001 - a sink that fails is its own consumer's problem
                pass
            if request.notify is not last:  # neighbours share one (one event loop's streams): no hash
                last = request.notify
                if last is not None:
                    notify.add(last)
        for wake in notify:  # once for the requests that share it
            try:
                wake()
            except Exception:  # noqa: BLE001
                pass

    def _drop(self, cancelled: set[int]) -> None:
        if not cancelled:
            return
        for request in [r for r in self._running.values() if r.rid in cancelled]:
            self._end(request, END)
        with self._lock:
            gone = [r for r in self._waiting if r.rid in cancelled]
            self._waiting = deque(r for r in self._waiting if r.rid not in cancelled)
        for request in gone:
            self._end(request, END)

    def _admit(self) -> None:
        if not self._waiting:  # read without the lock: a request queued meanwhile waits one tick
            return
        reach = sum(r.reach for r in self._running.values())
        while True:
            with self._lock:
                if not self._waiting:
                    return
                request = self._waiting[0]
                full = len(self._running) + request.rows > self.pool.slots or reach + request.reach > self.positions
                if self._running and full:
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
        progress = []
        for r in running.values():  # a decoding request's stays the same tick after tick: kept
            if r.progress is None:
                r.progress = Progress(r.rid, len(r.prompt) - r.fed, r.next_token is not None)
            progress.append(r.progress)
        tick = schedule(progress, self.max_num_batched_tokens, self.chunked)
        if tick.empty:
            return
        decoding = [running[rid] for rid in tick.decode]
        if decoding and self.batched:
            self._decode(decoding)
            decoding = []
        feeds: dict[int, dict[str, np.ndarray]] = {}
        widths: dict[int, int] = {}
        for r in decoding:
            feeds[r.sid] = self.rules.feeds(np.array([[r.next_token]], np.int64), len(r.prompt) + len(r.tokens) - 1)
            widths[r.rid] = 1
        for rid, count in tick.chunks:
            r = running[rid]
            count = 1 if self.stepwise and r.fed else count
            ids = np.array([r.prompt[r.fed : r.fed + count]], np.int64)
            feeds[r.sid] = self.rules.feeds(ids, r.fed)
            widths[rid] = count
        results = self.pool.step(feeds, errors="return", logits="last", before_run=self._flush) if feeds else {}
        self.ticks += 1
        picking: list[Request] = []
        logits: list[np.ndarray] = []
        for rid in widths:
            r = running[rid]
            out = results[r.sid]
            if isinstance(out, BaseException):
                self._end(r, out)
                continue
            if r.next_token is None:
                r.fed += widths[rid]
                r.progress = None
                if r.fed < len(r.prompt):
                    continue
            group = self._fork(r) if r.siblings else [r]
            picking += group
            logits += [out["logits"][0, -1]] * len(group)
        if picking:
            self._pick(picking, np.stack(logits))

    def _fork(self, r: Request) -> list[Request]:
        """``r`` and its siblings, each on a copy of ``r``'s stream now that its prompt is fed."""
        group = [r]
        for sibling in r.siblings:
            try:
                sibling.sid = self.pool.fork(r.sid)  # type: ignore[arg-type]
            except OrtStateError as exc:
                self._end(sibling, exc)
                continue
            sibling.fed = r.fed
            self._running[sibling.rid] = sibling
            group.append(sibling)
        r.siblings = []
        return group

    def _decode(self, decoding: list[Request]) -> None:
        """Every decoding request's one-token step as one batch (``KvPool.decode``): feeds built
        once for all rows, as Hugging Face batches them (masks left-padded; positions from them), and
        the greedy requests' tokens picked in one argmax."""
        count = len(decoding)
        tokens, pasts_list, sids = [], [], []
        for r in decoding:
            tokens.append(r.next_token)
            pasts_list.append(len(r.prompt) + len(r.tokens) - 1)
            sids.append(r.sid)
        pasts = np.array(pasts_list, np.int64)
        width = int(pasts.max()) + 1
        mask = (np.arange(width)[None, :] >= (width - 1 - pasts)[:, None]).astype(np.int64)
        try:
            feeds = self.rules.feeds(np.array(tokens, np.int64).reshape(count, 1), width - 1, mask=mask)
            logits = self.pool.decode(sids, feeds, logits="last", before_run=self._flush)["logits"][:, -1]
        except OrtStateError as exc:
            for r in decoding:
                self._end(r, exc)
            return
        self._pick(decoding, logits)

    def _pick(self, requests: list[Request], logits: np.ndarray) -> None:
        """Each request's next token from its row of ``logits`` ``[requests, vocab]``, by its own
        options: the plain greedy ones in one argmax, the others together (:func:`~.sampler.choose`)."""
        accept = self._accept
        if all(r.plain for r in requests):  # the common case: no per-row work at all
            for r, token in zip(requests, logits.argmax(axis=-1).tolist()):
                accept(r, token)
            return
        tokens = logits.argmax(axis=-1)
        others = [k for k, r in enumerate(requests) if not r.plain]
        scores = logits[others]  # a copy: the grammar masks it, logprobs read the raw logits
        matchers = [requests[k].matcher for k in others]
        constrained = any(m is not None for m in matchers)
        if constrained:  # every constrained row's mask in one call
            mask_logits(scores, matchers)
        picked = choose(scores, [requests[k].row for k in others])
        tokens[others] = advance(matchers, picked.tolist()) if constrained else picked
        for k in others:
            r = requests[k]
            if r.logprobs is not None:
                r.scored = Scored.of(logits[k], int(tokens[k]), r.logprobs)
        for r, token in zip(requests, tokens.tolist()):
            accept(r, token)

    def _accept(self, r: Request, token: int) -> None:
        r.tokens.append(token)
        if r.streamed:
            self._outgoing.append((r, token if r.scored is None else r.scored))  # see _send
        stopped = token in r.stops if r.stops is not None else r.criteria.reason(r.tokens) is not None
        if stopped or len(r.tokens) >= r.max_new_tokens or (r.matcher is not None and r.matcher.complete):
            self._end(r, END)
        else:
            if r.next_token is None:
                r.progress = None
            r.next_token = token

    def _end(self, request: Request, last: Any) -> None:
        if self._running.pop(request.rid, None) is not None and request.sid is not None and not request.keep:
            self.pool.close(request.sid)
        siblings, request.siblings = request.siblings, []
        for sibling in siblings:  # never forked: they end as it does
            self._end(sibling, last)
        if request.on_end is not None:
            try:
                request.on_end(request)
            except Exception:  # noqa: BLE001 - its owner's problem, never the other requests'
                pass
        self._send(request, last)

    def _send(self, request: Request, item: Any) -> None:
        """Queue ``item`` for the request's sink (see :meth:`_flush`)."""
        self._outgoing.append((request, item))

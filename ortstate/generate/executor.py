"""What runs a tick's plan (:class:`~ortstate.scheduler.requests.Plan`) on a KV pool and says which
requests it ended: the streams of the requests admitted opened (or their kept streams emptied), the
decoding requests stepped by one token as one batch (``KvPool.decode``), the prompt chunks stepped,
the other choices of a prompt fed forked, then each request's next token picked by its own options
and random generator (the plain greedy ones in one argmax), as a lone
:class:`~ortstate.generate.Generator` picks it; a ``json_schema``'s rows from logits their
grammars masked, all of the tick's in one call, and a row ends once its answer is complete. Its
items go to :class:`~.delivery.Delivery`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from ..decoders import FeedRules
from ..errors import OrtStateError, StateError
from ..scheduler.requests import Plan, Scheduler
from ..streams import KvPool
from .delivery import Delivery
from .request import END, Request
from .sampler import NO_TOKEN, RowState, choose, no_token, unpickable
from .scored import Scored
from .structured import advance, mask_logits

__all__ = ["Executor", "Running"]


class Running:
    """A request on its stream: what picking its tokens needs, at hand (read every tick)."""

    __slots__ = ("base", "max_new_tokens", "next_token", "plain", "request", "row", "scored", "sid", "stops", "tokens")

    def __init__(self, request: Request, sid: int) -> None:
        self.request, self.sid = request, sid
        self.tokens = request.tokens
        self.base = len(request.prompt) - 1  # its cache holds base + len(tokens) positions while it decodes
        self.max_new_tokens, self.stops, self.plain = request.max_new_tokens, request.stops, request.plain
        self.next_token: int | None = None
        self.row = RowState.start(
            request.options, request.prompt, request.criteria.token_ids, request.rng, request.tokens
        )
        self.scored: Scored | None = None


class Executor:
    """Runs ``scheduler``'s plans on ``pool``, fed by ``rules``; tells the scheduler each request that
    ends, and each stream that ends up in its prefix cache."""

    def __init__(self, pool: KvPool, rules: FeedRules, delivery: Delivery, scheduler: Scheduler) -> None:
        self.pool, self.rules, self.delivery, self.scheduler = pool, rules, delivery, scheduler
        # decoding requests go to the pool as one batch (KvPool.decode) unless a row's feeds hold a
        # value every row of a run shares (cache_position: one per cache length)
        self.batched = "cache_position" not in rules.names
        self.requests: dict[int, Request] = {}  # queued or running, choices not started included
        self.running: dict[int, Running] = {}
        self.cached: dict[Hashable, int] = {}  # the prefix cache's streams, by the scheduler's keys
        self.ticks = 0
        self.prefilled = 0  # prompt tokens fed (those a stream held already, cached, are not)
        self._out = delivery.items

    def adopt(self, request: Request) -> None:
        """Know ``request`` and its siblings (queued to the scheduler by the engine)."""
        for r in (request, *request.siblings):
            self.requests[r.rid] = r

    def run(self, plan: Plan) -> None:
        """Run one tick's ``plan``."""
        forks, prefixes = dict(plan.forks), {rid: rest for rid, *rest in plan.prefixes}
        for key in plan.evict:
            self.pool.close(self.cached.pop(key))
        for rid in plan.admit:
            error = self._start(rid, prefixes.get(rid))
            if error is not None:  # its choices never start either
                for choice in forks.get(rid, ()):
                    self.end(choice, error)
        if plan.empty:
            return
        decoding = [self.running[rid] for rid in plan.decode]
        decoded: tuple[list[Running], np.ndarray] | None = None
        if decoding and self.batched:
            decoded = self._decode(decoding)
            decoding = []
        feeds: dict[int, dict[str, np.ndarray]] = {}
        for run in decoding:
            feeds[run.sid] = self.rules.feeds(np.array([[run.next_token]], np.int64), run.base + len(run.tokens))
        chunks = [(self.running[rid], first, count) for rid, first, count in plan.chunks if rid in self.running]
        for run, first, count in chunks:
            ids = np.array([run.request.prompt[first : first + count]], np.int64)
            feeds[run.sid] = self.rules.feeds(ids, first)
            self.prefilled += count
        results = self.pool.step(feeds, errors="return", logits="last", before_run=self.delivery.flush) if feeds else {}
        self.ticks += 1
        fed = {run.request.rid for run, first, count in chunks if first + count == len(run.request.prompt)}
        picking: list[Running] = []
        logits: list[np.ndarray] = []
        for run in [*decoding, *(run for run, _, _ in chunks)]:
            out = results[run.sid]
            rid = run.request.rid
            if isinstance(out, BaseException):
                self.end(rid, out)
                for choice in forks.get(rid, ()):
                    self.end(choice, out)
                continue
            if run.next_token is None and rid not in fed:
                continue  # a chunk before its prompt's last
            group = [run, *self._fork(run, forks.get(rid, ()))]
            picking += group
            logits += [out["logits"][0, -1]] * len(group)
        # one pick a tick (a grammar's rows masked in one call), the batch decoded first
        if decoded is not None and picking:
            self._pick([*decoded[0], *picking], np.concatenate([decoded[1], np.stack(logits)]))
        elif decoded is not None:
            self._pick(*decoded)
        elif picking:
            self._pick(picking, np.stack(logits))

    def end(self, rid: int, last: Any) -> None:
        """End request ``rid`` (and its choices not started) with ``last`` (:data:`END` or an error):
        its stream the prefix cache's (or closed; a kept one given back), ``last`` to its sink."""
        for ended in self.scheduler.end(rid) or (rid,):
            run = self.running.pop(ended, None)
            request = self.requests.pop(ended, None)
            if request is None:
                continue
            kept = request.kept
            if run is not None and kept is None:
                self._cache(run, last is END)
            elif run is not None and kept is not None:
                kept.release(request.prompt + request.tokens, self.pool.length(run.sid))
            elif kept is not None:
                kept.busy = False
            self._out.append((request, last))

    # -- inside -----------------------------------------------------------------------------------
    def drop_cache(self) -> None:
        """Close every stream of the prefix cache."""
        for key in list(self.cached):
            self.scheduler.forget(key)
            self.pool.close(self.cached.pop(key))

    def _start(self, rid: int, prefix: list | None) -> OrtStateError | None:
        """Request ``rid`` on a stream: a new one (holding ``prefix``: ``[key, length, moved]``, a
        copy of the first ``length`` positions of ``key``'s stream, or that cached stream itself, cut
        to them), or its kept stream (emptied if it reuses none); the error it ended with where
        there was none for it."""
        request = self.requests[rid]
        kept = request.kept
        try:
            if prefix is not None:
                key, length, moved = prefix
                sid = self._prefix(key, length, moved)
            elif kept is None:
                sid, length = self.pool.open(), 0
            else:
                sid, length = kept.sid, request.reused
                if not request.reused and kept.tokens:
                    self.pool.reset(sid)
                    kept.tokens = []
        except OrtStateError as exc:
            self.end(rid, exc)
            return exc
        self.running[rid] = Running(request, sid)
        if request.started is not None:
            request.started(length)
        return None

    def _prefix(self, key: Hashable, length: int, moved: bool) -> int:
        """A stream holding the first ``length`` positions of ``key``'s (see :meth:`_start`)."""
        if moved:
            sid = self.cached.pop(key)
            self.pool.trim(sid, length)
            return sid
        source = self.running[key].sid if key in self.running else self.cached.get(key)
        if source is None:  # the request it was to copy failed to start
            raise StateError(f"the stream holding the prompt's first {length} tokens is gone")
        return self.pool.fork(source, length)

    def _cache(self, run: Running, whole: bool) -> None:
        """``run``'s stream, its request ended (``whole``: not by an error), to the prefix cache, or
        closed: the scheduler says which of the cached streams go now."""
        sid, request = run.sid, run.request
        key = ("stream", sid)
        self.cached[key] = sid
        held = (request.prompt + request.tokens)[: self.pool.length(sid)] if whole else ()
        for gone in self.scheduler.cache(key, held):
            self.pool.close(self.cached.pop(gone))

    def _fork(self, run: Running, choices: tuple[int, ...]) -> list[Running]:
        """``run``'s other ``choices``, each on a copy of its stream now that its prompt is fed."""
        started = []
        for rid in choices:
            try:
                sid = self.pool.fork(run.sid)
            except OrtStateError as exc:
                self.end(rid, exc)
                continue
            self.running[rid] = choice = Running(self.requests[rid], sid)
            started.append(choice)
        return started

    def _decode(self, decoding: list[Running]) -> tuple[list[Running], np.ndarray] | None:
        """Every decoding request's one-token step as one batch (``KvPool.decode``): feeds built
        once for all rows, as Hugging Face batches them (masks left-padded; positions from them);
        the rows and their last logits to pick from (None: the run failed, its requests ended)."""
        count = len(decoding)
        tokens, pasts_list, sids = [], [], []
        for run in decoding:
            tokens.append(run.next_token)
            pasts_list.append(run.base + len(run.tokens))
            sids.append(run.sid)
        pasts = np.array(pasts_list, np.int64)
        width = int(pasts.max()) + 1
        mask = (np.arange(width)[None, :] >= (width - 1 - pasts)[:, None]).astype(np.int64)
        try:
            feeds = self.rules.feeds(np.array(tokens, np.int64).reshape(count, 1), width - 1, mask=mask)
            logits = self.pool.decode(sids, feeds, logits="last", before_run=self.delivery.flush)["logits"][:, -1]
        except OrtStateError as exc:
            for run in decoding:
                self.end(run.request.rid, exc)
            return None
        return decoding, logits

    def _pick(self, runs: list[Running], logits: np.ndarray) -> None:
        """Each request's next token from its row of ``logits`` ``[requests, vocab]``, by its own
        options: the plain greedy ones in one argmax, the others together (:func:`~.sampler.choose`);
        a request with no token to pick (NaN logits) ends with the error saying so."""
        tokens = logits.argmax(axis=-1)
        tokens[unpickable(logits, tokens)] = NO_TOKEN
        others = [k for k, run in enumerate(runs) if not run.plain]
        if others:
            scores = logits[others]  # a copy: a grammar masks it, logprobs read the raw logits
            matchers = [runs[k].request.matcher for k in others]
            constrained = any(m is not None for m in matchers)
            if constrained:  # every constrained row's mask in one call
                mask_logits(scores, matchers)
            picked = choose(scores, [runs[k].row for k in others])
            if constrained:
                picked = advance([m if t != NO_TOKEN else None for m, t in zip(matchers, picked)], picked.tolist())
            tokens[others] = picked
            for k in others:
                run = runs[k]
                if run.request.logprobs is not None and tokens[k] != NO_TOKEN:
                    run.scored = Scored.of(logits[k], int(tokens[k]), run.request.logprobs)
        for k, (run, token) in enumerate(zip(runs, tokens.tolist())):
            if token == NO_TOKEN:
                self.end(run.request.rid, no_token(logits, k))
            else:
                self._accept(run, token)

    def _accept(self, run: Running, token: int) -> None:
        run.tokens.append(token)
        request = run.request
        if request.streamed:
            self._out.append((request, token if run.scored is None else run.scored))
        stopped = token in run.stops if run.stops is not None else request.criteria.reason(run.tokens) is not None
        complete = request.matcher is not None and request.matcher.complete  # its answer is whole
        if stopped or complete or len(run.tokens) >= run.max_new_tokens:
            self.end(request.rid, END)
        else:
            run.next_token = token

"""``ContinuousBatcher``: many generations of one converted LLM at once, continuously batched.

Each request is a stream of a :class:`~ortstate.streams.kv_pool.KvPool`; an :class:`~.engine.Engine`
thread steps them all: every request decoding in one batched run per tick, prompts fed in chunks
between them (see :mod:`.schedule`). Each request's tokens are those a lone
:class:`~ortstate.generate.Generator` gives for the same prompt, options and seed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

from ..decoders import FeedRules
from ..errors import GenerationError, StateError
from ..streams.kv_pool import KvPool
from .engine import END, Engine, Request, Scored
from .options import SearchOptions
from .outbox import Outbox
from .pooled_decoder import pool_decoder
from .prompts import check_prompts
from .stopping import StopCriteria

__all__ = ["ContinuousBatcher", "KeptStream"]

DEFAULT_MAX_NUM_BATCHED_TOKENS = 256


@dataclass
class KeptStream:
    """A stream of the pool kept open between generations (a conversation's cache).

    Attributes:
        sid: the pool's stream.
        tokens: what its cache holds: the first ``len(tokens)`` positions (prompts and generated
            tokens as they were fed; a generation's last token is never fed).
        busy: a generation runs on it (set from the engine's thread when it ends).
    """

    sid: int
    tokens: list[int] = field(default_factory=list)
    busy: bool = False

    def reuses(self, prompt: Sequence[int]) -> int:
        """How many of ``prompt``'s tokens its cache holds already: all it holds if they start the
        prompt and leave at least one token to feed, else 0 (it is emptied and fed again)."""
        held = self.tokens
        return len(held) if len(held) < len(prompt) and list(prompt[: len(held)]) == held else 0


class ContinuousBatcher:
    """Generates for many prompts at once on one pool of streams.

    Args:
        pool: a :class:`~ortstate.streams.kv_pool.KvPool` of the decoder (``from_dir`` makes one).
        rules: how the decoder is fed (``from_dir`` reads them from the folder).
        search_defaults: what ``generation_config.json`` sets (``from_dir`` reads it).
        eos_token_ids: tokens that end a request (with ``stop_at_eos``).
        max_num_batched_tokens: prompt tokens fed per tick, all prompts together.
    """

    def __init__(
        self,
        pool: KvPool,
        rules: FeedRules,
        *,
        search_defaults: dict[str, Any] | None = None,
        eos_token_ids: Sequence[int] = (),
        vocab_size: int | None = None,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ) -> None:
        if type(max_num_batched_tokens) is not int or max_num_batched_tokens < 1:
            raise GenerationError(f"max_num_batched_tokens must be an integer >= 1, got {max_num_batched_tokens!r}")
        self.pool = pool
        self.rules = rules
        self.search_defaults = dict(search_defaults or {})
        self.eos_token_ids = tuple(eos_token_ids)
        self.vocab_size = vocab_size
        self._engine = Engine(pool, rules, max_num_batched_tokens)
        self._outboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Outbox] = weakref.WeakKeyDictionary()
        self._outboxes_lock = threading.Lock()

    @classmethod
    def from_dir(
        cls,
        model_dir: str | os.PathLike[str],
        *,
        slots: int = 64,
        kv_cache_bytes: int | None = None,
        max_context: int | None = None,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
        threads: int | None = None,
        int8_activations: bool = False,
        sess_options: ort.SessionOptions | None = None,
        model: str | os.PathLike[str] | None = None,
    ) -> ContinuousBatcher:
        """Convert an optimum-intel export folder's decoder and pool it.

        Args:
            slots: requests generating at once (more wait their turn).
            kv_cache_bytes: the KV memory of all requests (default: a quarter of the machine's).
            max_context: positions one request may reach (default: the config's
                ``max_position_embeddings``, else 4096).
            threads: ONNX Runtime's intra-op threads (default: its own choice).
            int8_activations: compressed weights compute on int8-quantized activations (faster;
                logits move ~1e-2, see ``ortstate.convert``).
            model: the folder's decoder already converted (an ONNX file of either form, as
                ``ortstate convert`` writes it) to load instead of converting the IR here: a
                process that only loads holds less memory at its peak.

        Raises:
            GenerationError, and any conversion or pool error (all ``OrtStateError``).
        """
        pooled = pool_decoder(
            model_dir,
            slots=slots,
            kv_cache_bytes=kv_cache_bytes,
            max_context=max_context,
            threads=threads,
            int8_activations=int8_activations,
            sess_options=sess_options,
            model=model,
        )
        return cls(
            pooled.pool,
            pooled.rules,
            search_defaults=pooled.search_defaults,
            eos_token_ids=pooled.eos_token_ids,
            vocab_size=pooled.vocab_size,
            max_num_batched_tokens=max_num_batched_tokens,
        )

    # -- generation -------------------------------------------------------------------------------
    def generate_many(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 16, *, stop_at_eos: bool = True, **search: Any
    ) -> list[list[int]]:
        """Generate for every prompt (at once, as the pool allows); each list of new tokens is what
        ``Generator.generate(prompt, max_new_tokens, **search)`` gives.

        Raises:
            GenerationError: a bad prompt or option (before anything runs); RunError and the like:
                a request whose run failed (the others finish first).
        """
        rows = check_prompts(prompts, max_new_tokens, vocab_size=self.vocab_size)
        requests = [self._request(row, max_new_tokens, stop_at_eos, search) for row in rows]
        done = threading.Semaphore(0)
        errors: list[BaseException] = []

        def sink_for(request: Request):
            def sink(item: Any) -> None:
                if item is END or isinstance(item, BaseException):
                    if isinstance(item, BaseException):
                        errors.append(item)
                    done.release()

            return sink

        for request in requests:
            request.sink = sink_for(request)
            request.streamed = False  # the tokens are read from request.tokens at the end
            self._engine.submit(request)
        for _ in requests:
            done.acquire()
        if errors:
            raise errors[0]
        return [r.tokens for r in requests]

    async def stream(
        self,
        prompt: Sequence[int],
        max_new_tokens: int = 16,
        *,
        stop_at_eos: bool = True,
        kept: KeptStream | None = None,
        logprobs: int | None = None,
        **search: Any,
    ) -> AsyncIterator[int | Scored]:
        """Each new token of one generation as it is picked (batched with every other request).

        Args:
            kept: continue this kept stream (:meth:`keep`): only what its cache does not hold yet
                is fed (all of the prompt, from an empty cache, when the cache is not its start:
                see :meth:`KeptStream.reuses`); afterwards its ``tokens`` say what it holds.
            logprobs: each token comes as a :class:`~.engine.Scored` with that many top tokens.

        Raises:
            GenerationError: a bad prompt or option, or ``kept`` busy with another generation.
        """
        (row,) = check_prompts([prompt], max_new_tokens, vocab_size=self.vocab_size)
        request = self._request(row, max_new_tokens, stop_at_eos, search)
        request.logprobs, request.plain = logprobs, request.plain and logprobs is None
        if kept is not None:
            self._continue_kept(request, kept, row)
        loop = asyncio.get_running_loop()
        outbox = self._outbox(loop)
        items: deque[Any] = deque()
        key = id(items)
        request.sink = items.append
        request.notify = outbox.wake
        try:
            rid = self._engine.submit(request)
        except BaseException:
            if kept is not None:
                kept.busy = False
            raise
        finished = False
        try:
            while True:
                while not items:  # one future a wait, awaited here: no coroutine between
                    waiter = loop.create_future()
                    outbox.waiting[key] = (items, waiter)  # the drain takes it out as it wakes us
                    await waiter
                item = items.popleft()
                if item is END:
                    finished = True
                    return
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
        finally:
            outbox.waiting.pop(key, None)  # left while waiting (cancelled, or the loop closed)
            if not finished:
                self._engine.cancel(rid)

    # -- kept streams (conversations) -------------------------------------------------------------
    def keep(self) -> KeptStream:
        """A new stream kept open between generations (:meth:`stream`'s ``kept``).

        Raises:
            PoolFullError: every row is taken by a stream generating now.
        """
        return KeptStream(self.pool.open())

    def forget(self, kept: KeptStream) -> None:
        """Close a kept stream (not while it is busy)."""
        self.pool.close(kept.sid)

    def save_kept(self, kept: KeptStream, path: str | os.PathLike[str]) -> None:
        """Write a kept stream's caches (not while it is busy) as a snapshot :meth:`load_kept` reads."""
        self.pool.save(kept.sid, path)

    def load_kept(self, path: str | os.PathLike[str], tokens: Sequence[int]) -> KeptStream:
        """A kept stream at :meth:`save_kept`'s snapshot, whose cache holds ``tokens``.

        Raises:
            StateError: the snapshot is not one of this model's, or holds another number of positions.
        """
        sid = self.pool.load(path)
        held = self.pool.length(sid)
        if held != len(tokens):
            self.pool.close(sid)
            raise StateError(f"{path}: its caches hold {held} positions, its tokens are {len(tokens)}")
        return KeptStream(sid, [int(t) for t in tokens])

    def close(self) -> None:
        """Stop the engine's thread (requests still running end with an error)."""
        self._engine.close()

    def __enter__(self) -> ContinuousBatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ticks(self) -> int:
        """Ticks run so far (each: one decode batch and the prompt chunks beside it)."""
        return self._engine.ticks

    # -- helpers ----------------------------------------------------------------------------------
    def _outbox(self, loop: asyncio.AbstractEventLoop) -> Outbox:
        with self._outboxes_lock:
            outbox = self._outboxes.get(loop)
            if outbox is None:
                outbox = self._outboxes[loop] = Outbox(loop)
            return outbox

    def _continue_kept(self, request: Request, kept: KeptStream, row: list[int]) -> None:
        """Make ``request`` run on ``kept`` (busy until it ends), feeding only what its cache lacks."""
        if kept.busy:
            raise GenerationError(f"kept stream {kept.sid} is busy with another generation")
        request.fed = kept.reuses(row)
        request.sid, request.keep, request.reset_first = kept.sid, True, request.fed == 0 and bool(kept.tokens)
        kept.busy = True
        if request.reset_first:
            kept.tokens = []

        def ended(r: Request) -> None:  # in the engine's thread: the stream is idle again
            kept.tokens = (r.prompt + r.tokens)[: self.pool.length(kept.sid)]
            kept.busy = False

        request.on_end = ended

    def _request(self, prompt: list[int], max_new_tokens: int, stop_at_eos: bool, search: dict[str, Any]) -> Request:
        options = SearchOptions.build(self.search_defaults, **search)
        if options.beam_search:
            raise GenerationError("ContinuousBatcher does not batch beam search; use Generator for num_beams > 1")
        if options.stop_strings:
            raise GenerationError("ContinuousBatcher takes stop_token_ids, not stop strings (no tokenizer)")
        if len(prompt) + max_new_tokens > self.pool.max_context:
            raise GenerationError(
                f"a prompt of {len(prompt)} tokens and max_new_tokens {max_new_tokens} reach past the pool's "
                f"max_context of {self.pool.max_context}",
                field="max_new_tokens",
            )
        seed = options.draw_seed()
        eos = self.eos_token_ids if stop_at_eos else ()
        criteria = StopCriteria(eos, options.stop_token_ids, (), None)
        rng = np.random.default_rng(seed) if seed is not None else None
        return Request(list(prompt), int(max_new_tokens), options, criteria, sink=lambda _: None, rng=rng)

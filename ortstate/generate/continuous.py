"""``ContinuousBatcher``: many generations of one converted LLM at once, continuously batched.

Each request is a stream of a :class:`~ortstate.streams.KvPool`; the pool's loop steps them all,
its :class:`~.engine.Engine` one tick a round: every request decoding in one batched run per tick,
prompts fed in chunks between them (see :mod:`ortstate.scheduler.requests`). Each request's
tokens are those a lone :class:`~ortstate.generate.Generator` gives for the same prompt, options
and seed. With the prefix cache (on by default), a request starts from a copy of the longest
start of its prompt that a stream of the pool holds, and feeds only the rest.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import onnxruntime as ort

from ..decoders import FeedRules
from ..errors import GenerationError
from ..streams import KvPool
from .batch_plan import batch_options, plan_requests
from .choice_stream import ChoiceStream, TokenStream
from .delivery import Outboxes, tag
from .engine import Engine
from .kept import KeptStream, load_kept
from .options import SearchOptions
from .pooled_decoder import pool_decoder
from .prompts import check_prompts
from .request import END, Request
from .schema_source import SchemaSource
from .structured import Matcher

__all__ = ["ContinuousBatcher"]

DEFAULT_MAX_NUM_BATCHED_TOKENS = 256


class ContinuousBatcher:
    """Generates for many prompts at once on one pool of streams.

    Args:
        pool: a :class:`~ortstate.streams.KvPool` of the decoder (``from_dir`` makes one).
        rules: how the decoder is fed (``from_dir`` reads them from the folder).
        search_defaults: what ``generation_config.json`` sets (``from_dir`` reads it).
        eos_token_ids: tokens that end a request (with ``stop_at_eos``).
        max_num_batched_tokens: prompt tokens fed per tick, all prompts together.
        tokenizer: the model's (a :class:`~ortstate.generate.Tokenizer`), for ``json_schema``;
            ``from_dir`` loads the folder's ``tokenizer.json`` when one is first asked for.
        prefix_cache: start each request from the longest start of its prompt a stream of the pool
            holds, the streams of requests ended kept as a cache within the KV budget (where
            ``pool.prefix_sharing``; see :mod:`ortstate.scheduler.requests`).
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
        tokenizer: Any = None,
        prefix_cache: bool = True,
    ) -> None:
        if type(max_num_batched_tokens) is not int or max_num_batched_tokens < 1:
            raise GenerationError(f"max_num_batched_tokens must be an integer >= 1, got {max_num_batched_tokens!r}")
        self.pool = pool
        self.rules = rules
        self.search_defaults = dict(search_defaults or {})
        self.eos_token_ids = tuple(eos_token_ids)
        self.vocab_size = vocab_size
        self._schemas = SchemaSource(tokenizer, vocab_size)
        self._engine = Engine(pool, rules, max_num_batched_tokens, prefix_cache)
        self._ids = itertools.count()  # request ids (next() on it is atomic: callers on any thread)
        self._outboxes = Outboxes()

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
        tokenizer: Any = None,
        prefix_cache: bool = True,
    ) -> ContinuousBatcher:
        """Convert an optimum-intel export folder's decoder and pool it.

        Args:
            slots: requests generating at once (more wait their turn).
            kv_cache_bytes: the KV memory of all requests (default: a quarter of the machine's).
            max_context: positions one request may reach (default: the config's
                ``max_position_embeddings``, ``n_positions``, ..., else 4096; at most the config's).
            threads: ONNX Runtime's intra-op threads (default: its own choice).
            int8_activations: compressed weights compute on int8-quantized activations (faster;
                logits move ~1e-2, see ``ortstate.convert``).
            model: the folder's decoder already converted (an ONNX file of either form, as
                ``ortstate convert`` writes it) to load instead of converting the IR here: a
                process that only loads holds less memory at its peak.
            tokenizer: the model's, for ``json_schema`` (default: the folder's ``tokenizer.json``,
                loaded when a request first has a schema).
            prefix_cache: as the class takes it.

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
        batcher = cls(
            pooled.pool,
            pooled.rules,
            search_defaults=pooled.search_defaults,
            eos_token_ids=pooled.eos_token_ids,
            vocab_size=pooled.vocab_size,
            max_num_batched_tokens=max_num_batched_tokens,
            tokenizer=tokenizer,
            prefix_cache=prefix_cache,
        )
        batcher._schemas.folder = model_dir
        return batcher

    # -- generation -------------------------------------------------------------------------------
    def generate_many(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 16, *, stop_at_eos: bool = True, **search: Any
    ) -> list[list[int]]:
        """Generate for every prompt (at once, as the pool allows); each list of new tokens is what
        ``Generator.generate(prompt, max_new_tokens, **search)`` gives (with ``n`` > 1: ``n`` lists
        per prompt, prompt ``p``'s choice ``i`` at ``p * n + i``, as ``Generator.generate_batch``).

        Raises:
            GenerationError: a bad prompt or option (before anything runs); RunError and the like:
                a request whose run failed (the others finish first).
        """
        rows = check_prompts(prompts, max_new_tokens, vocab_size=self.vocab_size)
        options = self.search_options(max_new_tokens, **search)
        done = threading.Semaphore(0)
        errors: list[BaseException] = []

        def sink(item: Any) -> None:
            if item is END or isinstance(item, BaseException):
                if isinstance(item, BaseException):
                    errors.append(item)
                done.release()

        sinks = [sink] * options.n  # (the tokens are read from each request's list at the end)
        schemas = [self._matchers(options, max_new_tokens, stop_at_eos) for _ in rows]  # each prompt its own
        groups = [
            self._requests(row, max_new_tokens, stop_at_eos, options, sinks, streamed=False, matchers=m)
            for row, m in zip(rows, schemas)
        ]
        requests = [r for group in groups for r in group]
        for group in groups:
            self._engine.submit(group[0])
        for _ in requests:
            done.acquire()
        if errors:
            raise errors[0]
        return [r.tokens for r in requests]

    def stream(
        self,
        prompt: Sequence[int],
        max_new_tokens: int = 16,
        *,
        stop_at_eos: bool = True,
        kept: KeptStream | None = None,
        logprobs: int | None = None,
        **search: Any,
    ) -> TokenStream:
        """Each new token of one generation as it is picked (batched with every other request);
        its ``cached_tokens``: the prompt's tokens not fed (a kept stream's, the prefix cache's).

        Args:
            kept: continue this kept stream (:meth:`keep`): only what its cache does not hold yet
                is fed (all of the prompt, from an empty cache, when the cache is not its start:
                see :meth:`KeptStream.reuses`); afterwards its ``tokens`` say what it holds.
            logprobs: each token comes as a :class:`~.scored.Scored` with that many top tokens.

        Raises:
            GenerationError: a bad prompt or option (now), or ``kept`` busy with another generation
                (at the first item); ``n`` > 1 is :meth:`stream_choices`'.
        """
        if search.get("n") not in (None, 1):
            raise GenerationError("stream() gives one choice: for n > 1 use stream_choices()", field="n")
        request = self._checked(prompt, max_new_tokens, stop_at_eos, logprobs, search)
        return TokenStream(lambda started: self._items(*request, kept=kept, rids=[], tagged=False, started=started))

    def stream_choices(
        self,
        prompt: Sequence[int],
        max_new_tokens: int = 16,
        *,
        stop_at_eos: bool = True,
        logprobs: int | None = None,
        **search: Any,
    ) -> ChoiceStream:
        """:meth:`stream` for ``n`` choices (``n`` in ``search``, sampling): ``(choice, token)`` as each
        is picked. The prompt is fed once; then each choice runs on its own copy of the stream
        (:meth:`KvPool.fork <ortstate.streams.KvPool.fork>`), choice ``i`` sampled with
        ``seed + i``. Each choice's tokens are those ``Generator.generate_batch`` gives it.
        ``cancel(i)`` on what it returns ends choice ``i`` early (the others go on).

        Raises:
            GenerationError: a bad prompt or option, ``n`` above the pool's slots.
        """
        rids: list[int] = []  # the choices' request ids, known once the iteration starts
        request = self._checked(prompt, max_new_tokens, stop_at_eos, logprobs, search)
        items = functools.partial(self._items, *request, kept=None, rids=rids, tagged=True)
        return ChoiceStream(lambda started: items(started=started), lambda: rids, self._engine.cancel)

    def _checked(
        self, prompt: Sequence[int], max_new_tokens: int, stop_at_eos: bool, logprobs: int | None, search: dict
    ) -> tuple[list[int], int, bool, SearchOptions, int | None, list[Matcher] | None]:
        """A request of :meth:`stream` or :meth:`stream_choices`, checked now, its schema's matchers
        made here (its requests are made as its items are first asked for, on the consumer's event
        loop)."""
        (row,) = check_prompts([prompt], max_new_tokens, vocab_size=self.vocab_size)
        options = self.search_options(max_new_tokens, **search)
        return row, max_new_tokens, stop_at_eos, options, logprobs, self._matchers(options, max_new_tokens, stop_at_eos)

    async def _items(
        self,
        prompt: list[int],
        max_new_tokens: int,
        stop_at_eos: bool,
        options: SearchOptions,
        logprobs: int | None,
        matchers: list[Matcher] | None,
        *,
        kept: KeptStream | None,
        rids: list[int],
        tagged: bool,
        started: Callable[[int], None],
    ) -> AsyncIterator[Any]:
        """The items of a request's choices as the engine hands them over (``tagged``: as ``(choice,
        item)``); ``rids`` gets their ids; ``started``: told the prompt's tokens cached."""
        outbox = self._outboxes.of(asyncio.get_running_loop())
        items: deque[Any] = deque()
        sinks = [functools.partial(tag, items.append, i) for i in range(options.n)] if tagged else [items.append]
        delivery = {"notify": outbox.wake, "logprobs": logprobs, "kept": kept, "matchers": matchers, "started": started}
        requests = self._requests(prompt, max_new_tokens, stop_at_eos, options, sinks, **delivery)
        rids += [r.rid for r in requests]
        async for entry in self._engine.items(requests, items, outbox, tagged):
            yield entry

    # -- kept streams (conversations) -------------------------------------------------------------
    # Each goes to the pool's loop (``pool.call``) and runs there between two ticks: the one way to a
    # kept stream, for an event loop's coroutine or a script (``asyncio.run(batcher.keep())``) alike.
    async def keep(self) -> KeptStream:
        """A new stream kept open between generations (:meth:`stream`'s ``kept``).

        Raises:
            PoolFullError: every row is taken by a stream generating now.
        """
        return KeptStream(await self.pool.call(self.pool.open))

    async def forget(self, kept: KeptStream) -> None:
        """Close a kept stream (not while it is busy)."""
        await self.pool.call(self.pool.close, kept.sid)

    async def save_kept(self, kept: KeptStream, path: str | os.PathLike[str]) -> None:
        """Write a kept stream's caches (not while it is busy) as a snapshot :meth:`load_kept` reads."""
        await self.pool.call(self.pool.save, kept.sid, path)

    async def load_kept(self, path: str | os.PathLike[str], tokens: Sequence[int]) -> KeptStream:
        """A kept stream at :meth:`save_kept`'s snapshot, whose cache holds ``tokens``.

        Raises:
            StateError: the snapshot is not one of this model's, or holds another number of positions.
        """
        return KeptStream(await self.pool.call(load_kept, self.pool, path, len(tokens)), [int(t) for t in tokens])

    def reset_prefix_cache(self) -> None:
        """Close the prefix cache's streams (the requests running, and kept streams, keep theirs)."""
        self._engine.drop_cache()

    def close(self) -> None:
        """Stop generating (requests running or waiting end with an error, the cache is closed)."""
        self._engine.close()

    def __enter__(self) -> ContinuousBatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, float]:
        """Requests ``running`` and ``waiting``, streams ``cached``, prompt tokens ``prefilled`` so
        far, the KV budget's share in use (``kv_usage``, the cache's included), now (no lock)."""
        return {**self._engine.counts(), "kv_usage": self.pool.kv_usage()}

    @property
    def prefix_cache(self) -> bool:
        """Whether it caches prefixes: asked, and ``pool.prefix_sharing`` (states of KV alone)."""
        return self._engine.prefix_cache

    @property
    def ticks(self) -> int:
        """Ticks run so far (each: one decode batch and the prompt chunks beside it)."""
        return self._engine.executor.ticks

    def search_options(self, max_new_tokens: int = 16, **search: Any) -> SearchOptions:
        """The :class:`SearchOptions` a request with these keywords uses (``generation_config.json``
        filling the rest), checked against this batcher (see :func:`~.batch_plan.batch_options`).

        Raises:
            GenerationError: naming the field at fault.
        """
        return batch_options(self.search_defaults, self.pool.slots, self.vocab_size, max_new_tokens, search)

    def _requests(
        self,
        prompt: list[int],
        max_new_tokens: int,
        stop_at_eos: bool,
        options: SearchOptions,
        sinks: Sequence[Callable[[Any], None]],
        **delivery: Any,
    ) -> list[Request]:
        """A prompt's requests (one per choice), complete: ``delivery`` as :func:`plan_requests` takes it."""
        eos = self.eos_token_ids if stop_at_eos else ()
        rids = [next(self._ids) for _ in range(options.n)]
        return plan_requests(rids, prompt, max_new_tokens, options, eos, self.pool.max_context, sinks, **delivery)

    @property
    def tokenizer(self) -> Any:
        """The tokenizer given, else the folder's (:attr:`.schema_source.SchemaSource.tokenizer`)."""
        return self._schemas.tokenizer

    def _matchers(self, options: SearchOptions, max_new_tokens: int, stop_at_eos: bool) -> list[Matcher] | None:
        eos = self.eos_token_ids if stop_at_eos else ()
        return self._schemas.matchers(options, eos, max_new_tokens)  # in the caller's thread

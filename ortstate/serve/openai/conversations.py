"""Conversations kept between requests: ortstate's extension of the OpenAI API.

A request carrying ``X-Ortstate-Conversation: ID`` continues conversation ``ID``: its KV cache stays
in the batcher's pool between turns (a :class:`~ortstate.generate.KeptStream`). A turn whose text
(the chat template's rendering of all its messages, or a completion's prompt) starts with the last
turn's text and its reply as the client got it is tokenized as that turn's token ids, the reply's
as they were generated, then the rest of the text's: the cache holds all but the last of those
already, so only what follows is fed (``usage.prompt_tokens_details.cached_tokens`` says how
many were not). Any other turn is tokenized afresh and, its ids not starting with what the cache
holds, prefilled whole from an empty cache: a turn is never answered from a cache that is not its
prompt's start. One request at a time per conversation (another waits a few seconds, then is
refused with 409).

At most ``limit`` conversations are kept: one more makes room by parking (with a state directory:
one that cannot be, a full disk, stays and the new one is refused 503) or forgetting the least
recently used idle one, and :meth:`Conversations.park_idle` parks those
idle for a while; a forgotten conversation's next turn is prefilled whole. With ``ttl``, one idle
that long is removed (kept or parked); :meth:`Conversations.delete` removes one at once.

With a state directory (:mod:`.conversation_files` says what is kept there, and how it is bounded
by ``max_bytes``): each turn's token ids are logged before its reply ends (:mod:`.conversation_log`),
so a server killed between turns loses none: its next turn is fed from those ids, as on a server
never stopped. Every conversation is parked there when the server stops, and a server started
again on the directory continues it. A parked file that cannot be read back is dropped (logged):
the turn is prefilled whole.

Servers that share the directory (``shared=True``: Ray Serve's replicas) take no lock on it: each
turn's conversation is parked there as the turn ends, and the server the next turn is routed to
claims its files by renaming them (another finds them gone), so any of them continues it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from ...errors import OrtStateError, PoolFullError, ServeError
from ...generate import ContinuousBatcher
from ..log_format import LIVE
from .api import ApiError
from .conversation_files import ConversationFiles
from .conversation_names import ID_PATTERN
from .conversation_store import Conversation, ConversationStore

__all__ = ["HEADER", "Conversations"]

HEADER = "x-ortstate-conversation"
WAIT_SECONDS = 5.0  # a request on a busy conversation waits that long for it
logger = logging.getLogger("ortstate.serve")
T = TypeVar("T")


class Conversations:
    """The conversations of one server (``state_dir``: parked and logged there, found there again;
    ``max_bytes``: its bound, see :mod:`.conversation_files`; ``ttl``: seconds idle before one is
    removed)."""

    def __init__(
        self,
        batcher: ContinuousBatcher,
        state_dir: str | os.PathLike[str] | None,
        limit: int = 1024,
        *,
        shared: bool = False,
        max_bytes: int | None = None,
        ttl: float | None = None,
    ) -> None:
        if state_dir is None and (shared or max_bytes is not None):
            raise ServeError("conversations shared between servers, or bounded on disk, need a state directory")
        self.batcher = batcher
        self.state_dir = None if state_dir is None else Path(state_dir)
        self.limit = limit
        self.shared = shared
        self.ttl = ttl
        self.name = f"{socket.gethostname()}-{os.getpid()}"  # which server holds a conversation
        self._kept: OrderedDict[str, Conversation] = OrderedDict()  # least recently used first
        self._claimed: set[str] = set()  # a request (or parking, restoring, deleting) runs on these
        self._last: dict[str, float] = {}  # when a request on each last ended
        self.lost: dict[str, str] = {}  # conversations park_all could not park: why
        self._ending: set[asyncio.Task[None]] = set()  # turns being logged (and, shared, parked)
        self.files = None
        self._store: ConversationStore | None = None
        if self.state_dir is not None:
            self.files = ConversationFiles(self.state_dir, self.name, shared=shared, max_bytes=max_bytes)
            self._store = ConversationStore(batcher, self.files)

    @property
    def parked(self) -> int:
        return 0 if self.files is None else self.files.count()

    async def take(self, cid: str) -> Conversation:
        """Conversation ``cid`` (a new one if unknown), claimed for one request until :meth:`done`.

        Raises:
            ApiError: 400 a malformed id, 409 another request on it did not end in time, 503 no
                row of the pool is free for it, or (a new one) no room: the least recently used
                conversation cannot be parked; 500 the state directory cannot be written.
        """
        if not ID_PATTERN.fullmatch(cid):
            raise ApiError(f"{HEADER}: 1 to 128 of A-Z a-z 0-9 . _ ~ -, not . or .., got {cid[:40]!r}", param=HEADER)
        deadline = time.monotonic() + WAIT_SECONDS
        while cid in self._claimed or (cid in self._kept and self._kept[cid].kept.busy):
            if time.monotonic() > deadline:
                raise ApiError(f"conversation {cid} has a request running", 409, param=HEADER, error_code="busy")
            await asyncio.sleep(0.005)
        self._claimed.add(cid)  # while this awaits the pool's thread, no other request takes it
        try:
            conversation = self._kept.get(cid)
            if conversation is None:
                await self._make_room()
                try:
                    conversation = await self._restore(cid)
                    conversation = conversation or Conversation(await self.batcher.keep())
                except PoolFullError as exc:
                    raise ApiError(str(exc), 503, kind="server_error", error_code="server_full") from None
                self._kept[cid] = conversation
            self._kept.move_to_end(cid)
        except BaseException:
            self._claimed.discard(cid)
            raise
        return conversation

    def done(self, cid: str) -> asyncio.Task[None] | None:
        """The request on ``cid`` ended (its stream turns idle once the batcher lets go of it). With
        a state directory the turn it answered is logged, and (shared) the conversation parked once
        the batcher lets go of it, by the task returned: await it before the reply ends. It raises
        :class:`ApiError` (500) if the turn could not be logged: the conversation is then as it
        was before the turn."""
        conversation = self._kept.get(cid)
        self._last[cid] = time.monotonic()
        files = self.files
        if files is None or conversation is None or (conversation.turns == conversation.logged[0] and not self.shared):
            self._claimed.discard(cid)
            return None
        written = None
        if conversation.turns != conversation.logged[0]:  # submitted now: records go in the order turns end
            written = files.log.submit(
                cid, LIVE, conversation.turns, conversation.text, conversation.ids, conversation.before
            )
        task = asyncio.get_running_loop().create_task(self._end_turn(cid, conversation, written))
        self._ending.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._ending.discard(task)
        if not task.cancelled():
            task.exception()  # its awaiter has it (or nobody waits: it was logged)

    async def _end_turn(self, cid: str, conversation: Conversation, written: asyncio.Future[None] | None) -> None:
        try:
            if written is not None:
                try:
                    await written
                except ServeError as exc:
                    conversation.turns, conversation.text, conversation.ids, conversation.before = conversation.logged
                    logger.warning("ortstate serve: conversation %s: its turn cannot be logged, undone: %s", cid, exc)
                    raise _unwritten(cid, exc) from None
                conversation.logged = conversation.now()
        finally:
            self._claimed.discard(cid)
        if self.shared:
            await self._park_when_idle(cid, conversation)  # (which keeps the bound)
        elif self.files is not None:  # the log grew
            await asyncio.to_thread(self.files.evict, set(self._claimed))

    async def _park_when_idle(self, cid: str, conversation: Conversation) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while conversation.kept.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if self._kept.get(cid) is conversation and cid not in self._claimed and not conversation.kept.busy:
            try:
                await self._park(cid, conversation)
            except (OrtStateError, OSError) as exc:  # it stays here: the next turn routed here continues it
                logger.warning("ortstate serve: conversation %s cannot be parked, it stays in memory: %s", cid, exc)

    async def park_idle(self, seconds: float) -> int:
        """Park every conversation idle for ``seconds`` in the state directory; how many were.

        Raises:
            OrtStateError, OSError: one could not be written (it stays in memory; the others wait).
        """
        if self.files is None:
            return 0
        since, count = time.monotonic() - seconds, 0
        for cid in list(self._kept):
            conversation = self._kept.get(cid)  # (gone meanwhile: parked by another)
            if conversation is not None and self._idle(cid) and self._last.get(cid, 0.0) <= since:
                await self._park(cid, conversation)
                count += 1
        return count

    async def park_all(self) -> int:
        """Park every idle conversation in the state directory (at shutdown); how many were."""
        if self.files is None:
            return 0
        count = 0
        for cid in list(self._kept):
            conversation = self._kept.get(cid)
            if conversation is None:
                continue
            if not self._idle(cid):
                self.lost[cid] = "a request was still running on it"
                logger.error("ortstate serve: conversation %s cannot be parked: a request was still running", cid)
                continue
            try:
                await self._park(cid, conversation)
                count += 1
            except (OrtStateError, OSError) as exc:
                self.lost[cid] = str(exc)
                logger.error(
                    "ortstate serve: conversation %s cannot be parked, its cache is lost (its answered turns stay "
                    "in the log): %s",
                    cid,
                    exc,
                )
        return count

    async def tend(self, idle_park: float | None) -> None:
        """What is done every so often: remove the conversations idle for the TTL, and park those
        idle for ``idle_park`` seconds.

        Raises:
            OrtStateError, OSError: one could not be parked, or its removal logged.
        """
        if self.ttl is not None:
            await self.expire(self.ttl)
        if idle_park is not None:
            await self.park_idle(idle_park)

    async def expire(self, ttl: float) -> None:
        """Remove every conversation idle for ``ttl`` seconds, kept or parked (a log line each)."""
        now = time.monotonic()
        for cid in list(self._kept):
            idle = now - self._last.get(cid, now)
            if cid in self._kept and self._idle(cid) and idle >= ttl:
                await self._forget(cid)
                logger.warning(
                    "ortstate serve: conversation %s expired: idle for %.0f s (--conversation-ttl %g)", cid, idle, ttl
                )
        if self.files is not None:
            await asyncio.to_thread(self.files.expire, ttl, set(self._claimed))

    async def delete(self, cid: str) -> None:
        """Remove conversation ``cid`` (kept or parked) and its files.

        Raises:
            ApiError: 404 there is none, 409 a request runs on it, 500 its removal cannot be logged.
        """
        if not ID_PATTERN.fullmatch(cid):
            raise _unknown(cid)
        if not self._idle(cid):
            raise ApiError(f"conversation {cid} has a request running", 409, error_code="busy")
        try:
            found = await self._forget(cid)
            outcome = None
            if self._store is not None:
                outcome = await self._claiming(cid, self._store.delete(cid))
        except ServeError as exc:
            raise _unwritten(cid, exc) from None
        if outcome == "busy":
            raise ApiError(f"conversation {cid} has a request running", 409, error_code="busy")
        if not found and outcome is None:
            raise _unknown(cid)

    def release(self) -> None:
        """Let go of the state directory (once the server has stopped; again: nothing); its log
        goes unless a conversation could not be parked (the next server there recovers it)."""
        if self.files is not None:
            self.files.release(remove_log=not self.lost)

    # -- helpers ----------------------------------------------------------------------------------
    def _idle(self, cid: str) -> bool:
        conversation = self._kept.get(cid)
        return cid not in self._claimed and (conversation is None or not conversation.kept.busy)

    async def _forget(self, cid: str) -> bool:
        """Close kept conversation ``cid`` (logged CLOSED); whether there was one."""
        conversation = self._kept.pop(cid, None)
        if conversation is None:
            return False
        self._last.pop(cid, None)
        if self._store is None:
            await self.batcher.forget(conversation.kept)
        else:
            await self._claiming(cid, self._store.forget(cid, conversation))
        return True

    async def _claiming(self, cid: str, work: Awaitable[T]) -> T:
        """``work`` on ``cid``, claimed meanwhile (a request for it waits, then finds it as it is left)."""
        claimed = cid in self._claimed
        self._claimed.add(cid)
        try:
            return await work
        finally:
            if not claimed:
                self._claimed.discard(cid)

    async def _make_room(self) -> None:
        while len(self._kept) >= self.limit:
            # the one the KV budget's rule picks (the least recently used), of those idle
            cid = self.batcher.pool.budget.victim((k, c) for k, c in enumerate(self._kept) if self._idle(c))
            if cid is None:
                return
            conversation = self._kept[cid]
            if self.files is None:
                del self._kept[cid]
                await self.batcher.forget(conversation.kept)
                logger.warning(
                    "ortstate serve: conversation %s evicted, the least recently used: --max-conversations %d are "
                    "kept and there is no --state-dir to park it in",
                    cid,
                    self.limit,
                )
                continue
            try:
                await self._park(cid, conversation)
            except (OrtStateError, OSError) as exc:  # (forgotten, its next turn would be tokenized afresh)
                logger.warning("ortstate serve: conversation %s cannot be parked, it stays in memory: %s", cid, exc)
                raise ApiError(
                    f"no room for another conversation: {self.limit} are in memory (--max-conversations) and the "
                    "least recently used cannot be parked, the state directory cannot be written; try again later",
                    503,
                    kind="server_error",
                    param=HEADER,
                    error_code="state_not_written",
                ) from None

    async def _park(self, cid: str, conversation: Conversation) -> None:
        """Park ``cid`` (see :meth:`ConversationStore.park`), then keep the directory in its bound.
        If it fails, ``cid`` stays in memory as it was."""
        assert self._store is not None and self.files is not None
        used = time.time() - (time.monotonic() - self._last.get(cid, time.monotonic()))
        await self._claiming(cid, self._store.park(cid, conversation, used))
        del self._kept[cid]
        self._last.pop(cid, None)
        await asyncio.to_thread(self.files.evict, set(self._claimed))

    async def _restore(self, cid: str) -> Conversation | None:
        if self._store is None:
            return None
        try:
            return await self._store.restore(cid)
        except ServeError as exc:
            raise _unwritten(cid, exc) from None


def _unknown(cid: str) -> ApiError:
    return ApiError(f"no conversation {cid[:40]!r}", 404, error_code="conversation_not_found")


def _unwritten(cid: str, exc: ServeError) -> ApiError:
    return ApiError(f"conversation {cid}: {exc}", 500, kind="server_error", error_code="state_not_written")

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

At most ``limit`` conversations are kept: one more makes room by parking (with a state directory)
or forgetting the least recently used idle one, and :meth:`Conversations.park_idle` parks those
idle for a while; a forgotten conversation's next turn is prefilled
whole. With a state directory, every conversation is parked there when the server stops:
``ID.npz`` (its caches, the pool's snapshot of the model) and ``ID.json`` (the tokens they hold,
the last turn's text and ids); a server started again on the directory continues it. A parked
file that cannot be read back is dropped (logged): the turn is prefilled whole.

Servers that share the directory (``shared=True``: Ray Serve's replicas) take no lock on it: each
turn's conversation is parked there as the turn ends, and the server the next turn is routed to
claims its files by renaming them (another finds them gone), so any of them continues it, and a
server killed between turns loses none.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import OrtStateError, PoolFullError, ServeError
from ..generate import ContinuousBatcher, KeptStream
from .openai_api import ApiError
from .state_dir import DirLock, open_state_dir

__all__ = ["HEADER", "ID_PATTERN", "Conversation", "Conversations"]

HEADER = "x-ortstate-conversation"
ID_PATTERN = re.compile(r"[A-Za-z0-9._~-]{1,128}")
WAIT_SECONDS = 5.0  # a request on a busy conversation waits that long for it
logger = logging.getLogger("ortstate.serve")


@dataclass
class Conversation:
    """One conversation: its kept stream, and what its last turn was.

    Attributes:
        text: the last turn's prompt text and its reply as generated (special tokens kept), or
            None (token ids only, or never answered).
        ids: the token ids of that: the prompt's and every generated one.
    """

    kept: KeptStream
    text: str | None = None
    ids: list[int] = field(default_factory=list)


class Conversations:
    """The conversations of one server (``state_dir``: parked there, found there again)."""

    def __init__(
        self,
        batcher: ContinuousBatcher,
        state_dir: str | os.PathLike[str] | None,
        limit: int = 1024,
        *,
        shared: bool = False,
    ) -> None:
        if shared and state_dir is None:
            raise ServeError("conversations shared between servers need a state directory")
        self.batcher = batcher
        self.state_dir = None if state_dir is None else Path(state_dir)
        self.limit = limit
        self.shared = shared
        self.name = f"{socket.gethostname()}-{os.getpid()}"  # which server holds a conversation
        self._kept: OrderedDict[str, Conversation] = OrderedDict()  # least recently used first
        self._claimed: set[str] = set()  # a request runs on these
        self._last: dict[str, float] = {}  # when a request on each last ended
        self._parked: set[str] = set()
        self.lost: dict[str, str] = {}  # conversations park_all could not park: why
        self._dir_lock: DirLock | None = None
        self._parking: set[asyncio.Task[None]] = set()  # shared: parks waiting for a cancelled turn's end
        if self.state_dir is not None:
            self._dir_lock, found = open_state_dir(self.state_dir, self.name, shared=shared)
            self._parked = {c for c in found if ID_PATTERN.fullmatch(c) and (self.state_dir / f"{c}.json").is_file()}

    @property
    def parked(self) -> int:
        if self.shared:  # the other servers park there too
            assert self.state_dir is not None
            return sum(1 for p in self.state_dir.glob("*.json") if ID_PATTERN.fullmatch(p.stem))
        return len(self._parked)

    async def take(self, cid: str) -> Conversation:
        """Conversation ``cid`` (a new one if unknown), claimed for one request until :meth:`done`.

        Raises:
            ApiError: 400 a malformed id, 409 another request on it did not end in time, 503 no
                row of the pool is free for it.
        """
        if not ID_PATTERN.fullmatch(cid):
            raise ApiError(f"{HEADER}: 1 to 128 of A-Z a-z 0-9 . _ ~ -, got {cid[:40]!r}", param=HEADER)
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
                conversation = await self._restore(cid) if cid in self._parked or self.shared else None
                try:
                    conversation = conversation or Conversation(await self.batcher.pool.call(self.batcher.keep))
                except PoolFullError as exc:
                    raise ApiError(str(exc), 503, kind="server_error", error_code="server_full") from None
                self._kept[cid] = conversation
            self._kept.move_to_end(cid)
        except BaseException:
            self._claimed.discard(cid)
            raise
        return conversation

    def done(self, cid: str) -> asyncio.Task[None] | None:
        """The request on ``cid`` ended (its stream turns idle once the batcher lets go of it).
        Shared: the conversation is parked as soon as the batcher lets go of it, by the task
        returned (await it to know it is written; it logs what fails)."""
        self._claimed.discard(cid)
        self._last[cid] = time.monotonic()
        if not (self.shared and cid in self._kept):
            return None
        task = asyncio.get_running_loop().create_task(self._park_when_idle(cid, self._kept[cid]))
        self._parking.add(task)
        task.add_done_callback(self._parking.discard)
        return task

    async def _park_when_idle(self, cid: str, conversation: Conversation) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while conversation.kept.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if self._kept.get(cid) is conversation and cid not in self._claimed and not conversation.kept.busy:
            await self._park_or_log(cid)

    async def _park_or_log(self, cid: str) -> None:
        try:
            await self._park(cid, self._kept[cid])
        except (OrtStateError, OSError) as exc:  # it stays here: the next turn routed here continues it
            logger.warning("ortstate serve: conversation %s cannot be parked, it stays in memory: %s", cid, exc)

    async def park_idle(self, seconds: float) -> int:
        """Park every conversation idle for ``seconds`` in the state directory; how many were.

        Raises:
            OrtStateError, OSError: one could not be written (it stays in memory; the others wait).
        """
        if self.state_dir is None:
            return 0
        since, count = time.monotonic() - seconds, 0
        for cid in list(self._kept):
            conversation = self._kept.get(cid)  # (gone meanwhile: parked by another)
            idle = conversation is not None and not conversation.kept.busy and cid not in self._claimed
            if idle and self._last.get(cid, 0.0) <= since:
                assert conversation is not None
                await self._park(cid, conversation)
                count += 1
        return count

    async def park_all(self) -> int:
        """Park every idle conversation in the state directory (at shutdown); how many were."""
        if self.state_dir is None:
            return 0
        count = 0
        for cid in list(self._kept):
            conversation = self._kept.get(cid)
            if conversation is None:
                continue
            if conversation.kept.busy or cid in self._claimed:
                self.lost[cid] = "a request was still running on it"
                logger.error("ortstate serve: conversation %s cannot be parked: a request was still running", cid)
                continue
            try:
                await self._park(cid, conversation)
                count += 1
            except (OrtStateError, OSError) as exc:
                self.lost[cid] = str(exc)
                logger.error("ortstate serve: conversation %s cannot be parked, it is lost: %s", cid, exc)
        return count

    def release(self) -> None:
        """Let go of the state directory (once the server has stopped)."""
        if self._dir_lock is not None:
            self._dir_lock.release()

    # -- helpers ----------------------------------------------------------------------------------
    # The pool's work (opening, saving, loading, closing a kept stream) runs in the pool's thread
    # between two of the batcher's ticks (``pool.call``): the event loop never waits on a run.
    async def _make_room(self) -> None:
        while len(self._kept) >= self.limit:
            idle = [c for c, k in self._kept.items() if not k.kept.busy and c not in self._claimed]
            if not idle:
                return
            cid = idle[0]
            conversation = self._kept[cid]
            try:
                if self.state_dir is not None:
                    await self._park(cid, conversation)
                    continue
            except (OrtStateError, OSError) as exc:
                logger.warning("ortstate serve: conversation %s cannot be parked, it is forgotten: %s", cid, exc)
            del self._kept[cid]
            await self.batcher.pool.call(self.batcher.forget, conversation.kept)

    async def _park(self, cid: str, conversation: Conversation) -> None:
        assert self.state_dir is not None
        npz, meta = self.state_dir / f"{cid}.npz", self.state_dir / f"{cid}.json"
        partial, partial_meta = self.state_dir / f"{cid}.partial.npz", self.state_dir / f"{cid}.partial"
        claimed = cid in self._claimed
        self._claimed.add(cid)  # a request for it waits until it is parked, then restores it
        try:
            await self.batcher.pool.call(self.batcher.save_kept, conversation.kept, partial)
            held = {"tokens": conversation.kept.tokens, "text": conversation.text, "ids": conversation.ids}
            partial_meta.write_text(json.dumps(held))
            os.replace(partial, npz)
            os.replace(partial_meta, meta)
            del self._kept[cid]
            self._last.pop(cid, None)
            await self.batcher.pool.call(self.batcher.forget, conversation.kept)
            self._parked.add(cid)
        finally:
            if not claimed:
                self._claimed.discard(cid)

    async def _restore(self, cid: str) -> Conversation | None:
        assert self.state_dir is not None
        npz, meta = self.state_dir / f"{cid}.npz", self.state_dir / f"{cid}.json"
        self._parked.discard(cid)
        if self.shared:  # claimed for this server by renaming its .json, which parking writes last
            claimed = meta.with_name(f"{meta.name}.claimed-{self.name}")
            try:
                meta.rename(claimed)
            except FileNotFoundError:
                return None
            meta = claimed
        try:
            held = json.loads(meta.read_text())
            text, ids = held["text"], [int(t) for t in held["ids"]]
            if text is not None and not isinstance(text, str):
                raise ValueError(f"text: expected a string, got {type(text).__name__}")
            kept = await self.batcher.pool.call(self.batcher.load_kept, npz, held["tokens"])
            return Conversation(kept, text, ids)
        except (OrtStateError, OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ortstate serve: conversation %s cannot be restored, it starts over: %s", cid, exc)
            return None
        finally:
            npz.unlink(missing_ok=True)
            meta.unlink(missing_ok=True)

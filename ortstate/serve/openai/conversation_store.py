"""An LLM server's conversations between its batcher's pool and the state directory: a
:class:`Conversation` (a kept stream of the pool, and what its last turn was) parked to its files
and restored from them (:mod:`.conversation_files`), each move logged (:mod:`.conversation_log`).

The pool's work (saving, loading, opening, closing a kept stream: the batcher's ``keep``,
``save_kept``, ``load_kept``, ``forget``) runs in the pool's loop between two ticks, file work in a
thread of its own: the event loop never waits on a run or a disk.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from ...errors import OrtStateError, PoolFullError, ServeError
from ...generate import ContinuousBatcher, KeptStream
from ...generate.turns import continued_at
from ..log_format import CLOSED, LIVE, PARKED
from .conversation_files import ConversationFiles
from .conversation_log import Parked

__all__ = ["Base", "Conversation", "ConversationStore"]

Base = tuple[str | None, list[int]]  # a turn a next one continues: its text (prompt and reply) and token ids

logger = logging.getLogger("ortstate.serve")


@dataclass
class Conversation:
    """One conversation: its kept stream, and what its last turn was.

    Attributes:
        text: the last turn's prompt text and its reply as generated (special tokens kept), or
            None (token ids only, or never answered).
        ids: the token ids of that: the prompt's and every generated one.
        turns: the turns answered.
        before: the text and ids the last turn continued (none: it continued none): what a redo of
            the last turn continues (its reply never reached the client: a hard stop, a retry), so
            it is answered as the last turn was.
        logged: (turns, text, ids, before) as the state directory holds them.
    """

    kept: KeptStream
    text: str | None = None
    ids: list[int] = field(default_factory=list)
    turns: int = 0
    before: Base = (None, [])
    logged: tuple[int, str | None, list[int], Base] = (0, None, [], (None, []))

    def base(self, text: str) -> Base | None:
        """The turn a request's ``text`` continues: the last one, else the one before it (a redo of
        the last); None: neither."""
        for base in ((self.text, self.ids), self.before):
            if continued_at(base[0], text) is not None:
                return base
        return None

    def now(self) -> tuple[int, str | None, list[int], Base]:
        """What :attr:`logged` holds once its last turn is logged."""
        return self.turns, self.text, self.ids, self.before


class ConversationStore:
    """Parks ``batcher``'s conversations in ``files`` and restores them."""

    def __init__(self, batcher: ContinuousBatcher, files: ConversationFiles) -> None:
        self.batcher = batcher
        self.files = files

    async def park(self, cid: str, conversation: Conversation, used: float) -> None:
        """Write ``cid``'s files privately, log the park, publish them and close its kept stream
        (``used``: when its last turn ended, wall clock).

        Raises:
            OrtStateError, OSError: something could not be written; nothing is published.
        """
        files, kept = self.files, conversation.kept
        held = Parked(list(kept.tokens), conversation.text, conversation.ids, conversation.turns, *conversation.before)
        try:
            await self.batcher.save_kept(kept, files.private(cid)[0])
            await asyncio.to_thread(files.write_meta, cid, held, used)
            await files.log.write(cid, PARKED, conversation.turns)
            await asyncio.to_thread(files.publish, cid)
        except BaseException:
            await asyncio.to_thread(files.discard, cid)
            raise
        await self.batcher.forget(kept)

    async def restore(self, cid: str) -> Conversation | None:
        """``cid`` from its parked files (claimed, loaded, logged LIVE, then removed), or None if
        it is not parked or its files cannot be read (logged; they are removed).

        Raises:
            PoolFullError: no row of the pool is free for it (its files stay).
            ServeError: it cannot be logged (its files stay).
        """
        files = self.files
        meta = await asyncio.to_thread(files.claim, cid)
        if meta is None:
            return None
        try:
            held = await asyncio.to_thread(files.read, meta)
            kept = await (self.batcher.load_kept(files.npz(cid), held.tokens) if held.tokens else self.batcher.keep())
        except PoolFullError:
            await asyncio.to_thread(files.unclaim, cid, meta)
            raise
        except (OrtStateError, OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ortstate serve: conversation %s cannot be restored, it starts over: %s", cid, exc)
            await asyncio.to_thread(files.remove, cid, meta)
            return None
        try:  # logged before its files go: a hard stop between the two loses nothing
            await files.log.submit(cid, LIVE, held.turns, held.text, held.ids, held.before)
        except ServeError:
            await self.batcher.forget(kept)
            await asyncio.to_thread(files.unclaim, cid, meta)
            raise
        await asyncio.to_thread(files.remove, cid, meta)
        restored = Conversation(kept, held.text, held.ids, held.turns, held.before)
        restored.logged = restored.now()
        return restored

    async def forget(self, cid: str, conversation: Conversation) -> None:
        """Close ``cid``'s kept stream, logged CLOSED.

        Raises:
            ServeError: it cannot be logged (the stream is closed all the same).
        """
        await self.batcher.forget(conversation.kept)
        await self.files.log.write(cid, CLOSED, conversation.turns)

    async def delete(self, cid: str) -> str | None:
        """Remove ``cid``'s parked files, logged CLOSED (see :meth:`ConversationFiles.delete`).

        Raises:
            ServeError: it cannot be logged (the files are gone all the same).
        """
        outcome = await asyncio.to_thread(self.files.delete, cid)
        if outcome == "removed":
            await self.files.log.write(cid, CLOSED, 0)
        return outcome

"""The LLM server's log of conversation turns: what makes a turn's token ids survive a hard stop
(SIGKILL, an out-of-memory kill, a power cut) with ``--state-dir``.

When a turn of a conversation ends, the conversation's token ids (its last prompt's and the reply's
as generated, :attr:`~.conversations.Conversation.ids`) and its text are logged before the reply
ends: a record per conversation (LIVE, the whole of it, never a difference) in
``DIR/turns-NAME/seg-N.log``, the folder of this server alone (a :class:`~ortstate.serve.log.Log`, as the
stream server's ``--durable`` journal, with its framing, checksums and compaction). Records are
group-committed: those submitted while a write is on its way go together in the next one, one
``write`` and one ``fsync`` for every turn that ended in the same moment. A conversation parked
(its cache in its files) is logged PARKED; one deleted or expired, CLOSED.

A turn's KV cache is not logged (it grows with every token): after a hard stop the next server on
the directory makes each conversation the log holds LIVE a parked one without a cache
(:mod:`.conversation_files`), whose next turn is prefilled whole from those ids, as the turn would
have been fed on a server never stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import ServeError
from ..log import SEGMENT_BYTES, Log
from ..log_format import HEADER, LIVE, Record

__all__ = ["TURNS_PREFIX", "Parked", "TurnLog", "folder_bytes", "read_turn"]

TURNS_PREFIX = "turns-"


@dataclass
class Parked:
    """A conversation as a parked ``.json`` holds it (and, without a cache, as a LIVE record of the log)."""

    tokens: list[int]  # what its ``.npz`` cache holds (none: no ``.npz``)
    text: str | None
    ids: list[int]
    turns: int = 0
    before_text: str | None = None  # what the last turn continued (see Conversation.before)
    before_ids: list[int] = field(default_factory=list)

    @property
    def before(self) -> tuple[str | None, list[int]]:
        return self.before_text, self.before_ids


def read_turn(data: bytes) -> Parked:
    """A LIVE turn record's conversation (no cache: ``tokens`` empty)."""
    record = Record.decode(memoryview(data)[HEADER.size :])
    outputs = record.outputs or {}
    return Parked([], *_read(outputs, ""), record.steps, *_read(outputs, "before_"))


def _read(outputs: dict[str, np.ndarray], prefix: str) -> tuple[str | None, list[int]]:
    text, ids = outputs.get(f"{prefix}text"), outputs.get(f"{prefix}ids")
    return None if text is None else text.tobytes().decode("utf-8"), [] if ids is None else [int(t) for t in ids]


def _encode(
    kind: int, cid: str, turns: int, text: str | None, ids: list[int] | None, before: tuple[str | None, list[int]]
) -> bytes:
    outputs: dict[str, np.ndarray] = {}
    if kind == LIVE:
        for prefix, (said, made) in (("", (text, ids)), ("before_", before)):
            outputs[f"{prefix}ids"] = np.asarray(made or [], np.int64)
            if said is not None:
                outputs[f"{prefix}text"] = np.frombuffer(said.encode("utf-8"), np.uint8)
    return Record(kind, cid, turns, None, outputs or None).encode()


class TurnLog:
    """This server's log of turns in ``state_dir/turns-NAME`` (its own folder, locked while it lives).

    Attributes:
        writes: the group writes made so far (each one ``write`` and one ``fsync``).
    """

    def __init__(self, state_dir: Path, name: str, segment_bytes: int = SEGMENT_BYTES) -> None:
        self._log = Log(state_dir / f"{TURNS_PREFIX}{name}", segment_bytes)
        self.folder = self._log.folder
        self.writes = 0
        self._queue: list[tuple[str, bytes, int, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Make and lock the folder and its first segment.

        Raises:
            ServeError: it cannot be made or locked.
        """
        try:
            self._log.open()
        except OSError as exc:
            why = exc.strerror or exc
            raise ServeError(f"--state-dir: cannot start the log of turns in {self.folder} ({why})") from None

    def submit(
        self,
        cid: str,
        kind: int,
        turns: int,
        text: str | None = None,
        ids: list[int] | None = None,
        before: tuple[str | None, list[int]] = (None, []),
    ) -> asyncio.Future[None]:
        """Queue conversation ``cid``'s record (LIVE: after ``turns`` turns, its ``text`` and
        ``ids``, and ``before``: the text and ids its last turn continued); done once it is on disk,
        or failed with a :class:`ServeError` naming the reason. Records are written in the order
        they are submitted (on the event loop)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._queue.append((cid, _encode(kind, cid, turns, text, ids, before), kind, done))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write())
        return done

    async def write(self, cid: str, kind: int, turns: int) -> None:
        """Log ``cid`` PARKED or CLOSED and wait until it is on disk.

        Raises:
            ServeError: it could not be written.
        """
        await self.submit(cid, kind, turns)

    async def _write(self) -> None:
        while self._queue:
            group, self._queue = self._queue, []
            try:  # off the event loop; what is submitted meanwhile waits for the next write
                await asyncio.to_thread(self._log.append, [(cid, data, kind) for cid, data, kind, _ in group])
                failed = None
            except OSError as exc:
                failed = ServeError(f"the state directory cannot be written ({exc.strerror or exc})")
            self.writes += 1
            for *_, done in group:
                if done.done():  # its request was cancelled: nobody waits
                    continue
                if failed is None:
                    done.set_result(None)
                else:
                    done.set_exception(failed)

    def bytes(self) -> int:
        """What the folder holds (its segments, and files being written there), in bytes."""
        return folder_bytes(self.folder)

    def close(self, remove: bool) -> None:
        """Stop logging; ``remove``: the folder goes too (every conversation is in its files)."""
        self._log.close(remove)


def folder_bytes(folder: str | Path) -> int:
    """The bytes of the files in ``folder`` (those removed meanwhile not counted)."""
    total = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return total

"""``--durable``: every step a client sees acknowledged survives a hard stop (SIGKILL, an
out-of-memory kill, a power cut).

The pool's loop (:mod:`ortstate.streams.loop`) calls :meth:`Journal.commit` once per round, in its
own thread, after the round's commands and tick ran and before any reply is sent: the round's
records (one per stream that stepped, opened, reset, parked, resumed or closed: the whole stream,
see :mod:`.journal_format`) go to the log in one ``write`` and one ``fsync`` (group commit, as a
database's), so an acknowledged step is on disk. If the log cannot be written, the round's streams
are put back as the log last holds them, the file is cut back to its last whole record, and the
round's callers get the error: nothing unlogged is acknowledged, nothing acknowledged is lost.

Each server logs to ``DIR/journal-NAME/seg-N.log`` files (its own folder, locked while it lives);
when one passes ``segment_bytes`` the next is started and a thread writes ``checkpoint-N.log`` (the
last record of every stream as the new segment starts, written, synced and renamed into place) and
then removes the older files: the log is compacted in the background, never growing past a few
segments. The log of a server that died is turned into parked files by the next server that starts
on the directory, or that is asked for a stream no one holds (:mod:`.journal_recovery`).

The folder, its segments and their compaction are a :class:`Log`, which the LLM server's log of
conversation turns (:mod:`.conversation_log`) is too. KV caches grow with the context: logging one
per step is refused (see :func:`refuse_kv`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ServeError
from .journal_format import HEADER, LIVE, PARKED, Record
from .journal_recovery import JOURNAL_PREFIX, LOG_FILE, hold_lock, remove_log, sync_dir

__all__ = ["SEGMENT_BYTES", "Journal", "Log", "refuse_kv"]

logger = logging.getLogger("ortstate.serve")
SEGMENT_BYTES = 64 << 20


def refuse_kv(pool: Any) -> None:
    """Raise if ``pool`` keeps KV caches (its state grows with each token: too large to log per step)."""
    if getattr(pool, "kv_cache_bytes", None) is not None:
        raise ServeError(
            "--durable logs each stream's whole state at every step; this model keeps KV caches, which grow "
            "with the context, so it is refused: serve it without --durable"
        )


class Log:
    """A folder of framed records (:mod:`.journal_format`), locked while it is written: records are
    appended in groups, one ``write`` and one ``fsync`` a group, into ``seg-N.log`` segments; once a
    segment passes ``segment_bytes`` the next is started and a thread writes ``checkpoint-N.log``
    (each id's last record) and removes the older files. The stream server's :class:`Journal` and
    the LLM server's turn log (:mod:`.conversation_log`) are each one."""

    def __init__(self, folder: Path, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.folder = folder
        self.segment_bytes = segment_bytes
        self.latest: dict[str, bytes] = {}  # each id's last LIVE record, as logged
        self._gen = 0
        self._fd = -1
        self._size = 0
        self._compacting: threading.Thread | None = None
        self._lock = -1
        self.broken: str | None = None  # the log cannot be written: nothing more is acknowledged

    def open(self) -> None:
        """Make and lock the folder, and its first segment.

        Raises:
            OSError: it cannot be made (it exists: another server's), locked or written.
        """
        self.folder.mkdir(mode=0o700)
        self._lock = hold_lock(self.folder)
        self._open_segment()

    def append(self, pending: list[tuple[str, bytes, int]]) -> None:
        """Log ``pending`` (id, encoded record, kind) in one write and one fsync; a record not LIVE
        (parked, closed) ends its id's place in :attr:`latest`.

        Raises:
            OSError: it could not be written; the segment is cut back to its last whole record (if
                even that fails, :attr:`broken` says why and every later append fails).
        """
        if self.broken is not None:
            raise OSError(errno.EIO, self.broken)
        try:
            _write_all(self._fd, b"".join(data for _, data, _ in pending))
            os.fsync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError as again:
                self.broken = again.strerror or str(again)
            raise
        self._size += sum(len(data) for _, data, _ in pending)
        for name, data, kind in pending:
            if kind == LIVE:
                self.latest[name] = data
            else:  # closed, or parked: its file holds it now, which another server may take
                self.latest.pop(name, None)
        if self._size >= self.segment_bytes and (self._compacting is None or not self._compacting.is_alive()):
            self._gen += 1
            self._open_segment()
            records = list(self.latest.values())  # here: the appending thread is the one that changes it
            self._compacting = threading.Thread(
                target=self._compact, args=(records,), name="ortstate-compact", daemon=True
            )
            self._compacting.start()

    def close(self, remove: bool) -> None:
        """Stop logging; ``remove``: the folder goes too (a clean stop: nothing left in memory)."""
        if self._compacting is not None:
            self._compacting.join()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock >= 0:
            if remove:
                remove_log(self.folder)
            os.close(self._lock)
            self._lock = -1

    def _open_segment(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        path = self.folder / f"seg-{self._gen:012d}.log"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._size = os.fstat(self._fd).st_size
        sync_dir(self.folder)

    def _compact(self, records: list[bytes]) -> None:
        """Write ``checkpoint-N``: ``records``, every id's last record as segment N starts (or
        later: a record of segment N replayed after it is newer still); then remove the files
        before it."""
        gen = self._gen
        path = self.folder / f"checkpoint-{gen:012d}.log"
        part = path.with_suffix(".part")
        try:
            with open(part, "wb") as f:
                f.write(b"".join(records))
                f.flush()
                os.fsync(f.fileno())
            os.replace(part, path)
            sync_dir(self.folder)
            for old in self.folder.iterdir():
                m = LOG_FILE.fullmatch(old.name)
                if m and int(m[2]) < gen:
                    old.unlink()
        except OSError as exc:  # the segments stay: nothing is lost, the log is only longer
            logger.warning("ortstate serve: cannot compact the log in %s: %s", self.folder, exc.strerror or exc)
            with contextlib.suppress(OSError):
                part.unlink()


class Journal(Log):
    """The durable log of one server's streams over ``pool``, in ``state_dir/journal-NAME``."""

    def __init__(self, state_dir: Path, name: str, pool: Any, segment_bytes: int = SEGMENT_BYTES) -> None:
        refuse_kv(pool)
        super().__init__(state_dir / f"{JOURNAL_PREFIX}{name}", segment_bytes)
        self.pool = pool
        self.steps: dict[str, int] = {}
        self._stream: dict[int, str] = {}  # pool id -> stream, for the streams in the pool
        self._pending: list[tuple[str, bytes, int]] = []
        self._parking: list[tuple[int, str]] = []  # pool streams whose park is not logged yet (still open)

    # -- start ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Make and lock this server's log folder and its first segment.

        Raises:
            ServeError: it cannot be made or locked.
        """
        try:
            self.open()
        except OSError as exc:
            raise ServeError(f"--durable: cannot start the log in {self.folder} ({exc.strerror or exc})") from None

    # -- in the pool's thread ---------------------------------------------------------------------
    def bind(self, stream: str, sid: int) -> None:
        """``stream`` is the new pool stream ``sid``."""
        self._stream[sid] = stream
        self.steps[stream] = 0

    def adopt(self, stream: str, sid: int, record: bytes) -> None:
        """``stream`` is pool stream ``sid``, resumed from its parked ``record``: logged LIVE."""
        self._stream[sid] = stream
        self.steps[stream] = Record.decode(memoryview(record)[HEADER.size :]).steps
        self.latest[stream] = record
        self.note(stream, LIVE, sid)

    def parked_record(self, stream: str, sid: int) -> bytes:
        """What ``stream``'s parked file holds: the whole stream (pool stream ``sid``)."""
        return Record(LIVE, stream, self.steps.get(stream, 0), self.pool.values(sid), self.last(stream)).encode()

    def keep(self, stream: str, sid: int) -> None:
        """``stream`` is pool stream ``sid`` again, its steps counted on (a park whose record could
        not be written)."""
        self._stream[sid] = stream

    def note(self, stream: str, kind: int, sid: int | None = None) -> None:
        """Log ``stream`` as it is now: LIVE (pool stream ``sid``: opened, reset or resumed), PARKED
        (in its file; its pool stream closed) or CLOSED. Written by the round's :meth:`commit`."""
        steps = self.steps.get(stream, 0)
        states = self.pool.values(sid) if kind == LIVE and sid is not None else None
        record = Record(kind, stream, steps, states, self.last(stream))
        self._pending.append((stream, record.encode(), kind))
        if kind != LIVE and sid is not None and self._stream.pop(sid, None) is not None and kind == PARKED:
            self._parking.append((sid, stream))

    def commit(self, results: dict[int, Any]) -> None:
        """Log the round: every stream of ``results`` that stepped, and the records :meth:`note`
        made; one write, one fsync. Raises (and puts the stepped streams back) if it cannot."""
        stepped = []
        parking, self._parking = self._parking, []
        if self.broken is not None:
            self._pending.clear()
            self._unpark(parking)
            raise ServeError(f"--durable: the log cannot be written ({self.broken}); no step is acknowledged")
        for sid, outputs in results.items():
            stream = self._stream.get(sid)
            if stream is None or isinstance(outputs, BaseException):
                continue
            record = Record(LIVE, stream, self.steps.get(stream, 0) + 1, self.pool.values(sid), outputs)
            self._pending.append((stream, record.encode(), LIVE))
            stepped.append((sid, stream))
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        try:
            self.append(pending)
        except OSError as exc:
            self._unpark(parking)
            self._undo(stepped)
            why = exc.strerror or exc
            raise ServeError(f"--durable: cannot write the log ({why}); the step was not made") from None
        for stream, _, kind in pending:
            if kind != LIVE:
                self.steps.pop(stream, None)
        for _, stream in stepped:
            self.steps[stream] += 1

    def last(self, stream: str) -> dict[str, np.ndarray] | None:
        """The outputs of ``stream``'s last logged step (None before its first)."""
        data = self.latest.get(stream)
        return None if data is None else Record.decode(memoryview(data)[HEADER.size :]).outputs

    # -- inside -----------------------------------------------------------------------------------
    def _unpark(self, parking: list[tuple[int, str]]) -> None:
        """Parks whose record was not written: their pool streams (still open) are logged on, so
        a step they take before the park is undone is logged too."""
        for sid, stream in parking:
            self._stream.setdefault(sid, stream)

    def _undo(self, stepped: list[tuple[int, str]]) -> None:
        """A write failed (the segment is cut back): put each stream that stepped back at its last
        logged state (the step is not made)."""
        for sid, stream in stepped:
            data = self.latest.get(stream)
            if data is not None:
                self.pool.put(sid, Record.decode(memoryview(data)[HEADER.size :]).states)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]

"""A log: a folder of framed records (:mod:`.log_format`), what both servers make durable with.

A server appends records in groups, one ``write`` and one ``fsync`` a group (group commit, as a
database's), into ``seg-N.log`` segments of a folder of its own, on which it holds an exclusive
``flock`` (its ``.lock``) for as long as it lives: the kernel lets go when the process ends, however
it ends. Once a segment passes ``segment_bytes`` the next is started and a thread writes
``checkpoint-N.log`` (the last record of every id as the new segment starts, written, synced and
renamed into place), then removes the older files: the log is compacted in the background, never
growing past a few segments.

A folder whose lock can be taken is an orphan: its server died. :func:`recover_orphans` replays it
(the newest checkpoint, then the segments after it; a torn record at the end of the last is dropped:
its replies were never sent), hands each id's last record to the server's own recovery, and removes
it. The stream server's ``--durable`` journal (:mod:`.streams.journal`) and the LLM server's log of
conversation turns (:mod:`.openai.conversation_log`) are each a :class:`Log`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

from .log_format import CLOSED, LIVE, read_records

__all__ = ["LOG_FILE", "SEGMENT_BYTES", "Log", "hold_lock", "recover_orphans", "remove_log", "replay", "sync_dir"]

SEGMENT_BYTES = 64 << 20
LOG_FILE = re.compile(r"(seg|checkpoint)-(\d{12})\.log")
_LOCK = ".lock"
logger = logging.getLogger("ortstate.serve")


class Log:
    """A folder of framed records (:mod:`.log_format`), locked while it is written: records are
    appended in groups, one ``write`` and one ``fsync`` a group, into ``seg-N.log`` segments; once a
    segment passes ``segment_bytes`` the next is started and a thread writes ``checkpoint-N.log``
    (each id's last record) and removes the older files."""

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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def hold_lock(folder: Path) -> int:
    """An exclusive lock on ``folder`` (its ``.lock``), held until its descriptor is closed.

    Raises:
        BlockingIOError: a live server holds it.
    """
    fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def replay(folder: Path) -> dict[str, bytes]:
    """Each id's last record in the log ``folder`` (closed ones left out)."""
    files = sorted((int(m[2]), m[1], p) for p in folder.iterdir() if (m := LOG_FILE.fullmatch(p.name)))
    start = max((g for g, kind, _ in files if kind == "checkpoint"), default=0)
    chosen = [(g, kind, p) for g, kind, p in files if g >= start and (kind == "seg" or g == start)]
    chosen.sort(key=lambda f: (f[0], f[1] == "seg"))  # a checkpoint before the segment it starts
    latest: dict[str, bytes] = {}
    for k, (_, kind, path) in enumerate(chosen):
        data = path.read_bytes()
        for begin, end, record in read_records(data):
            if record is None:
                where = "the last record (torn by the stop; never acknowledged)"
                if k != len(chosen) - 1 or kind != "seg":
                    where = "a damaged record and everything after it in this file"
                logger.warning("ortstate serve: %s: dropped %s at byte %d", path, where, begin)
                break
            if record.kind == CLOSED:
                latest.pop(record.stream, None)
            else:
                latest[record.stream] = data[begin:end]
    return latest


def recover_orphans(state_dir: Path, prefix: str, recover: Callable[[Path, Path], list[str]]) -> list[str]:
    """Turn every orphan log in ``state_dir`` (a folder named ``prefix``-NAME whose lock can be
    taken) into parked files, by ``recover(state_dir, folder)`` (the server's own: what it parks
    from each id's last record, :func:`replay` gives them), then remove it; the ids recovered."""
    recovered: list[str] = []
    for folder in sorted(state_dir.glob(f"{prefix}*")):
        try:
            lock = hold_lock(folder)
        except OSError:  # its server lives (or it is no folder of ours)
            continue
        try:
            recovered += recover(state_dir, folder)
            remove_log(folder)
        finally:
            os.close(lock)
    return recovered


def remove_log(folder: Path) -> None:
    """Remove the log folder ``folder`` (its lock file last: the folder is an orphan until then)."""
    for path in folder.iterdir():
        if path.name != _LOCK:
            path.unlink()
    with contextlib.suppress(OSError):
        (folder / _LOCK).unlink()
        folder.rmdir()


def sync_dir(folder: Path) -> None:
    """``fsync`` a folder: the names made, renamed or removed in it are on disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""``--durable``: every step a client sees acknowledged survives a hard stop (SIGKILL, an
out-of-memory kill, a power cut).

The pool's loop (:mod:`ortstate.streams.loop`) calls :meth:`Journal.commit` once per round, in its
own thread, after the round's commands and tick ran and before any reply is sent: the round's
records (one per stream that stepped, opened, reset, parked, resumed or closed: the whole stream,
see :mod:`.journal_format`) go to the log in one ``write`` and one ``fsync`` (group commit, as a
database's), so an acknowledged step is on disk. If the log cannot be written, the round's streams
are put back as the log last holds them, the file is cut back to its last whole record, and the
round's callers get the error: nothing unlogged is acknowledged, nothing acknowledged is lost.

The log is ``DIR/journal/seg-N.log`` files; when one passes ``segment_bytes`` the next is started
and a thread writes ``checkpoint-N.log`` (the last record of every stream as the new segment starts,
written, synced and renamed into place) and then removes the older files: the log is compacted in
the background, never growing past a few segments. A server started on the directory replays the
newest checkpoint and the segments from it; a record torn at the end of the last segment (its
checksum is wrong: the write it belonged to never finished, so its replies were never sent) is cut
off.

KV caches grow with the context: logging one per step is refused (see :func:`refuse_kv`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ServeError
from .journal_format import CLOSED, HEADER, LIVE, Record, read_records

__all__ = ["Journal", "refuse_kv"]

logger = logging.getLogger("ortstate.serve")
SEGMENT_BYTES = 64 << 20
_NAME = re.compile(r"(seg|checkpoint)-(\d{12})\.log")


def refuse_kv(pool: Any) -> None:
    """Raise if ``pool`` keeps KV caches (its state grows with each token: too large to log per step)."""
    if getattr(pool, "kv_cache_bytes", None) is not None:
        raise ServeError(
            "--durable logs each stream's whole state at every step; this model keeps KV caches, which grow "
            "with the context, so it is refused: serve it without --durable"
        )


class Journal:
    """The durable log of one server's streams over ``pool``, in ``folder/journal``."""

    def __init__(self, folder: Path, pool: Any, segment_bytes: int = SEGMENT_BYTES) -> None:
        refuse_kv(pool)
        self.folder = folder / "journal"
        self.pool = pool
        self.segment_bytes = segment_bytes
        self.latest: dict[str, bytes] = {}  # each stream's last record, as logged
        self.steps: dict[str, int] = {}
        self._stream: dict[int, str] = {}  # pool id -> stream, for the streams in the pool
        self._pending: list[tuple[str, bytes, int]] = []
        self._gen = 0
        self._fd = -1
        self._size = 0
        self._compacting: threading.Thread | None = None
        self.broken: str | None = None  # the log cannot be written: nothing more is acknowledged

    # -- start ------------------------------------------------------------------------------------
    def recover(self) -> list[Record]:
        """Replay the log: the streams it holds (LIVE and PARKED records, one per stream), and a new
        segment to append to. A torn tail of the last segment is cut off.

        Raises:
            ServeError: the log cannot be read or written, or is damaged before its tail.
        """
        try:
            self.folder.mkdir(exist_ok=True, mode=0o700)
            files = sorted((int(m[2]), m[1], p) for p in self.folder.iterdir() if (m := _NAME.fullmatch(p.name)))
            start = max((g for g, kind, _ in files if kind == "checkpoint"), default=0)
            replay = [(g, kind, p) for g, kind, p in files if g >= start and (kind == "seg" or g == start)]
            replay.sort(key=lambda f: (f[0], f[1] == "seg"))  # a checkpoint before the segment it starts
            for k, (_, kind, path) in enumerate(replay):
                self._replay(path, last=k == len(replay) - 1 and kind == "seg")
            self._gen = max((g for g, _, _ in files), default=0) + 1
            self._open_segment()
        except OSError as exc:
            raise ServeError(f"--durable: cannot use the log in {self.folder} ({exc.strerror or exc})") from None
        self._compact()  # what was replayed becomes one checkpoint, the old files go
        return [Record.decode(memoryview(b)[HEADER.size :]) for b in self.latest.values()]

    def _replay(self, path: Path, last: bool) -> None:
        data = path.read_bytes()
        for start, end, record in read_records(data):
            if record is None:
                if not last:
                    raise ServeError(f"--durable: the log file {path} is damaged at byte {start}; move it away")
                logger.warning("ortstate serve: %s: dropped a torn record at byte %d (never acknowledged)", path, start)
                with open(path, "r+b") as f:
                    f.truncate(start)
                    os.fsync(f.fileno())
                return
            if record.kind == CLOSED:
                self.latest.pop(record.stream, None)
                self.steps.pop(record.stream, None)
            else:
                self.latest[record.stream] = data[start:end]
                self.steps[record.stream] = record.steps

    # -- in the pool's thread ---------------------------------------------------------------------
    def bind(self, stream: str, sid: int, steps: int = 0) -> None:
        """``stream`` is pool stream ``sid`` (opened, resumed or recovered) with ``steps`` steps."""
        self._stream[sid] = stream
        self.steps.setdefault(stream, steps)

    def note(self, stream: str, kind: int, sid: int | None = None) -> None:
        """Log ``stream`` as it is now: LIVE (pool stream ``sid``: opened, reset or resumed), PARKED
        (in its file; its pool stream closed) or CLOSED. Written by the round's :meth:`commit`."""
        steps = self.steps.get(stream, 0)
        states = self.pool.values(sid) if kind == LIVE and sid is not None else None
        record = Record(kind, stream, steps, states, self.last(stream))
        self._pending.append((stream, record.encode(), kind))
        if kind != LIVE and sid is not None:
            self._stream.pop(sid, None)

    def commit(self, results: dict[int, Any]) -> None:
        """Log the round: every stream of ``results`` that stepped, and the records :meth:`note`
        made; one write, one fsync. Raises (and puts the stepped streams back) if it cannot."""
        stepped = []
        if self.broken is not None:
            self._pending.clear()
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
            _write_all(self._fd, b"".join(data for _, data, _ in pending))
            os.fsync(self._fd)
        except OSError as exc:
            self._undo(stepped, exc)
            why = exc.strerror or exc
            raise ServeError(f"--durable: cannot write the log ({why}); the step was not made") from None
        self._size += sum(len(data) for _, data, _ in pending)
        for stream, data, kind in pending:
            if kind == CLOSED:
                self.latest.pop(stream, None)
                self.steps.pop(stream, None)
            else:
                self.latest[stream] = data
        for _, stream in stepped:
            self.steps[stream] += 1
        if self._size >= self.segment_bytes and (self._compacting is None or not self._compacting.is_alive()):
            self._gen += 1
            self._open_segment()
            self._compacting = threading.Thread(target=self._compact, name="ortstate-compact", daemon=True)
            self._compacting.start()

    def last(self, stream: str) -> dict[str, np.ndarray] | None:
        """The outputs of ``stream``'s last logged step (None before its first)."""
        data = self.latest.get(stream)
        return None if data is None else Record.decode(memoryview(data)[HEADER.size :]).outputs

    def close(self) -> None:
        if self._compacting is not None:
            self._compacting.join()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- inside -----------------------------------------------------------------------------------
    def _undo(self, stepped: list[tuple[int, str]], exc: OSError) -> None:
        """A write failed: cut the segment back to its last whole record, and put each stream that
        stepped back at its last logged state (the step is not made)."""
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as again:
            self.broken = again.strerror or str(again)
        for sid, stream in stepped:
            data = self.latest.get(stream)
            if data is not None:
                self.pool.put(sid, Record.decode(memoryview(data)[HEADER.size :]).states)

    def _open_segment(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        path = self.folder / f"seg-{self._gen:012d}.log"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._size = os.fstat(self._fd).st_size
        _sync_dir(self.folder)

    def _compact(self) -> None:
        """Write ``checkpoint-N`` (every stream's last record as segment N starts), then remove the
        files before it."""
        gen, records = self._gen, list(self.latest.values())
        path = self.folder / f"checkpoint-{gen:012d}.log"
        part = path.with_suffix(".part")
        try:
            with open(part, "wb") as f:
                f.write(b"".join(records))
                f.flush()
                os.fsync(f.fileno())
            os.replace(part, path)
            _sync_dir(self.folder)
            for old in self.folder.iterdir():
                m = _NAME.fullmatch(old.name)
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


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

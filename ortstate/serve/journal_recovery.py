"""A durable log whose server is gone, turned into the parked files every server can resume.

Each ``--durable`` server logs to a folder of its own, ``STATE_DIR/journal-NAME``, and holds an
exclusive ``flock`` on its ``.lock`` for as long as it lives (the kernel lets go when the process
ends, however it ends). A folder whose lock can be taken is an orphan: its server died. Recovering
it (at a server's start, and, for servers sharing the directory, when a stream is asked for that no
server holds) replays it (the newest checkpoint, then the segments after it; a torn record at the
end of the last is dropped: its replies were never sent) and, for each stream it holds:

- **in the pool** (its last record LIVE): that record becomes the stream's parked file ``ID.rec``
  (no other server can hold it: a stream in a server's pool has no parked file to claim);
- **parked** (PARKED): the file is already there, or is still the ``ID.rec.parking-NAME`` its server
  wrote before logging the park, which is published now;
- a ``ID.rec.claimed-NAME`` (a parked file the dead server took but never logged as resumed) goes
  back to ``ID.rec``.

Then the folder is removed. Parking writes the file under a private name, logs the park, and only
then publishes the file: so a file another server can claim never holds a step the log has not.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

from ..output_files import write_bytes
from .journal_format import CLOSED, HEADER, LIVE, Record, read_records

__all__ = [
    "JOURNAL_PREFIX",
    "LOG_FILE",
    "PARKED_SUFFIX",
    "hold_lock",
    "recover_orphans",
    "remove_log",
    "replay",
    "sync_dir",
]

JOURNAL_PREFIX = "journal-"
PARKED_SUFFIX = ".rec"
_LOCK = ".lock"
LOG_FILE = re.compile(r"(seg|checkpoint)-(\d{12})\.log")
logger = logging.getLogger("ortstate.serve")


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
    """Each stream's last record in the log ``folder`` (closed streams left out)."""
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


def recover_orphans(
    state_dir: Path,
    prefix: str = JOURNAL_PREFIX,
    recover: Callable[[Path, Path], list[str]] | None = None,
) -> list[str]:
    """Turn every orphan log in ``state_dir`` (a folder named ``prefix``-NAME whose lock can be
    taken) into parked files, by ``recover(state_dir, folder)`` (default: streams, see the module
    docstring), then remove it; the ids recovered."""
    recovered: list[str] = []
    for folder in sorted(state_dir.glob(f"{prefix}*")):
        try:
            lock = hold_lock(folder)
        except OSError:  # its server lives (or it is no folder of ours)
            continue
        try:
            recovered += (recover or _recover)(state_dir, folder)
            remove_log(folder)
        finally:
            os.close(lock)
    return recovered


def _recover(state_dir: Path, folder: Path) -> list[str]:
    name = folder.name.removeprefix(JOURNAL_PREFIX)
    done = []
    for stream, record in replay(folder).items():
        parked = state_dir / f"{stream}{PARKED_SUFFIX}"
        parking = parked.with_name(f"{parked.name}.parking-{name}")
        claimed = parked.with_name(f"{parked.name}.claimed-{name}")
        if Record.decode(memoryview(record)[HEADER.size :]).kind == LIVE:
            write_bytes(parked, record)
            parking.unlink(missing_ok=True)
            claimed.unlink(missing_ok=True)
        elif parking.exists():
            os.replace(parking, parked)
        else:
            continue  # published before the stop: it is there, or another server holds it now
        done.append(stream)
    for left in state_dir.glob(f"*{PARKED_SUFFIX}.claimed-{name}"):
        os.replace(left, left.with_name(left.name.removesuffix(f".claimed-{name}")))
        done.append(left.name.removesuffix(f"{PARKED_SUFFIX}.claimed-{name}"))
    sync_dir(state_dir)
    if done:
        logger.info("ortstate serve: %d streams recovered from the log of a server that stopped: %s", len(done), name)
    return done


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

"""``--durable``: every step a client sees acknowledged survives a hard stop (SIGKILL, an
out-of-memory kill, a power cut).

The pool's loop (:mod:`ortstate.streams.loop`) calls :meth:`Journal.commit` once per round, on the
loop's thread, after the round's commands and tick ran and before any reply is sent: the round's
records (one per stream that stepped, opened, reset, parked, resumed or closed: the whole stream,
see :mod:`ortstate.serve.log_format`) go to the log in one ``write`` and one ``fsync`` (group commit, as a
database's), so an acknowledged step is on disk. If the log cannot be written, the round's streams
are put back as the log last holds them, the file is cut back to its last whole record, and the
round's callers get the error: nothing unlogged is acknowledged, nothing acknowledged is lost.

Each server logs to ``DIR/journal-NAME/seg-N.log`` files, a :class:`~ortstate.serve.log.Log` (its own folder,
locked while it lives, compacted in the background). The log of a server that died is turned into
parked files (:func:`recover_journals`) by the next server that starts on the directory, or that is
asked for a stream no one holds; for each stream it holds:

- **in the pool** (its last record LIVE): that record becomes the stream's parked file ``ID.rec``
  (no other server can hold it: a stream in a server's pool has no parked file to claim);
- **parked** (PARKED): the file is already there, or is still the ``ID.rec.parking-NAME`` its server
  wrote before logging the park, which is published now;
- a ``ID.rec.claimed-NAME`` (a parked file the dead server took but never logged as resumed) goes
  back to ``ID.rec``.

Then the folder is removed. Parking writes the file under a private name, logs the park, and only
then publishes the file: so a file another server can claim never holds a step the log has not.

KV caches grow with the context: logging one per step is refused (see :func:`refuse_kv`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ServeError
from ...output_files import write_bytes
from ..log import SEGMENT_BYTES, Log, recover_orphans, replay, sync_dir
from ..log_format import HEADER, LIVE, PARKED, Record

__all__ = ["JOURNAL_PREFIX", "PARKED_SUFFIX", "Journal", "recover_journals", "refuse_kv"]

JOURNAL_PREFIX = "journal-"
PARKED_SUFFIX = ".rec"
logger = logging.getLogger("ortstate.serve")


def refuse_kv(pool: Any) -> None:
    """Raise if ``pool`` keeps KV caches (its state grows with each token: too large to log per step)."""
    if getattr(pool, "kv_cache_bytes", None) is not None:
        raise ServeError(
            "--durable logs each stream's whole state at every step; this model keeps KV caches, which grow "
            "with the context, so it is refused: serve it without --durable"
        )


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


def recover_journals(state_dir: Path) -> list[str]:
    """Turn the logs of stream servers that died in ``state_dir`` into parked streams (see the
    module); the ids of the streams recovered."""
    return recover_orphans(state_dir, JOURNAL_PREFIX, _recover)


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

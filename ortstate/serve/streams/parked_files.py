"""A server's state directory as its parked streams' home: held (:mod:`ortstate.serve.state_dir`) unless shared,
each parked stream a file named by its id there, taken by renaming it (a server sharing the
directory finds it gone); with ``durable``, the server's own log (:mod:`.journal`) and the parked
files made from the logs of servers that died (:func:`.journal.recover_journals`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..log import sync_dir
from ..log_format import PARKED
from ..state_dir import DirLock, open_state_dir
from .ids import ID_PATTERN
from .journal import Journal, recover_journals
from .parking import DurableParking, Parking

__all__ = ["ParkedFiles"]


class ParkedFiles:
    """The parked streams' files of a :class:`~.service.StreamService` in ``folder``.

    Attributes:
        journal: the log of every step (``durable``), else None.
        parking: how a stream is saved to its file and loaded back (:mod:`.parking`).
        found: the ids of the streams parked there when it was opened (logs of dead servers
            included), for a server that does not share the directory.
    """

    def __init__(self, pool: Any, folder: Path, server: str, *, shared: bool, durable: bool) -> None:
        self.pool = pool
        self.folder = folder
        self.server = server  # the server's name, as a file name takes it
        self.shared = shared
        self.journal: Journal | None = None
        self.parking: Parking = Parking(pool)
        self._orphans_at = 0.0
        self._dir_lock: DirLock | None
        self._dir_lock, found = open_state_dir(folder, server, shared)
        recovered: list[str] = []
        if durable:
            try:
                recovered = self._start_durable()
            except BaseException:
                self.release(remove_log=True)
                raise
            found = [p.stem for p in folder.glob(f"*{self.parking.suffix}")]
        self.found = [] if shared else [*recovered, *(s for s in found if ID_PATTERN.fullmatch(s))]

    def _start_durable(self) -> list[str]:
        """Log to a folder of this server's own; turn the logs of servers that died into parked
        streams (:func:`.journal.recover_journals`): their ids."""
        self.journal = Journal(self.folder, self.server, self.pool)
        self.parking = DurableParking(self.pool, self.journal, self.server)
        recovered = self.recover_orphans(force=True)
        self.journal.start()
        self.pool.worker.on_commit = self.journal.commit
        return recovered

    def recover_orphans(self, force: bool = False) -> list[str]:
        """Parked files from the logs of servers that died, their ids (at most once a second unless
        ``force``: a server sharing the directory looks on every miss)."""
        if not force and time.monotonic() - self._orphans_at < 1.0:
            return []
        self._orphans_at = time.monotonic()
        return recover_journals(self.folder)

    def release(self, remove_log: bool) -> None:
        """Let go of the directory (another server may take it); the log is removed with
        ``remove_log`` (no stream left in memory)."""
        if self.journal is not None:
            sync_dir(self.folder)  # the parked files published: then the log may go
            self.journal.close(remove=remove_log)
        if self._dir_lock is not None:
            self._dir_lock.release()

    async def park(self, stream: str, sid: int) -> Path:
        """Write pool stream ``sid`` for ``stream``'s file, log the park, then close the pool
        stream; where it was written (to publish). If the file or the log record cannot be written
        (a full disk) it raises and ``stream`` stays in memory as it was, logged as before."""
        try:
            written = await self.pool.call(self.save, stream, sid, sid=sid)
        except BaseException:
            await self.pool.call(self.unsave, stream, sid, sid=sid)
            raise
        await self.pool.call(self.pool.close, sid, sid=sid)
        return written

    def save(self, stream: str, sid: int) -> Path:
        """(In the pool's thread.) Save pool stream ``sid`` for ``stream``'s file, the park logged
        with the round; where it was written (published once the park is logged). The pool stream
        stays open: it is closed once the log holds the park (:meth:`unsave` if it could not)."""
        written = self.parking.save(stream, sid, self.file(stream))
        if self.journal is not None:
            self.journal.note(stream, PARKED, sid)
        return written

    def unsave(self, stream: str, sid: int) -> None:
        """(In the pool's thread.) A park that failed (its file or its log record not written):
        ``stream`` stays pool stream ``sid``, logged as before; what was written privately goes."""
        private = self.parking.private(self.file(stream))
        if private is not None:
            private.unlink(missing_ok=True)
        if self.journal is not None:
            self.journal.keep(stream, sid)

    def file(self, stream: str) -> Path:
        return self.folder / f"{stream}{self.parking.suffix}"

    def claim(self, stream: str) -> Path | None:
        """Take ``stream``'s parked file for this server (renamed: another server sharing the
        directory finds it gone); None if there is none."""
        claimed = self.file(stream).with_name(f"{stream}{self.parking.suffix}.claimed-{self.server}")
        try:
            self.file(stream).rename(claimed)
        except FileNotFoundError:
            return None
        return claimed

    def count(self) -> int:
        """How many streams are parked in the directory (by any server sharing it)."""
        return sum(1 for p in self.folder.glob(f"*{self.parking.suffix}") if ID_PATTERN.fullmatch(p.stem))

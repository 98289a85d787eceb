"""How a server's parked stream is kept in its state directory: a pool snapshot (``ID.npz``, which a
``StatefulSession`` of the model loads too), or with ``--durable`` the stream's whole log record
(``ID.rec``: its state, its step count and the outputs of its last step, see
:mod:`ortstate.serve.log_format`), written under a private name and published only once the park is logged
(:mod:`ortstate.serve.log` says why).

The methods that touch the pool run in the pool's thread (through ``pool.call``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import StateError
from ...output_files import write_bytes
from ..log_format import LIVE, PEEK_BYTES, Record, peek_steps, read_records
from .journal import PARKED_SUFFIX, Journal

__all__ = ["DurableParking", "Parking"]


class Parking:
    """Parked streams as pool snapshots."""

    suffix = ".npz"

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def save(self, stream: str, sid: int, path: Path) -> Path:
        """Write pool stream ``sid`` to ``path``'s file (or where it waits to be published); where."""
        self.pool.save(sid, path)
        return path

    def private(self, path: Path) -> Path | None:
        """Where :meth:`save` writes ``path``'s file before it is published (None: in place)."""
        return None

    def publish(self, written: Path, path: Path) -> None:
        """Make what :meth:`save` wrote ``path``'s file (once the park is logged)."""

    def load(self, stream: str, path: Path) -> tuple[int, int | None]:
        """A pool stream holding the file ``path``; and its step count, if the file says."""
        return self.pool.load(path), None

    def steps(self, path: Path) -> int | None:
        """The step count the file ``path`` records (None: it records none)."""
        return None


class DurableParking(Parking):
    """Parked streams as log records, logged by ``journal``."""

    suffix = PARKED_SUFFIX

    def __init__(self, pool: Any, journal: Journal, server: str) -> None:
        super().__init__(pool)
        self.journal = journal
        self.server = server

    def save(self, stream: str, sid: int, path: Path) -> Path:
        private = path.with_name(f"{path.name}.parking-{self.server}")
        write_bytes(private, self.journal.parked_record(stream, sid))
        return private

    def private(self, path: Path) -> Path | None:
        return path.with_name(f"{path.name}.parking-{self.server}")

    def publish(self, written: Path, path: Path) -> None:
        os.replace(written, path)

    def load(self, stream: str, path: Path) -> tuple[int, int | None]:
        data = path.read_bytes()
        record = _record(data, path)
        if record.kind != LIVE or record.stream != stream or record.states is None:
            raise StateError(f"{path}: not a parked stream {stream}")
        sid = self.pool.restore(record.states)
        self.journal.adopt(stream, sid, data)
        return sid, record.steps

    def steps(self, path: Path) -> int | None:
        try:
            with open(path, "rb") as f:
                return peek_steps(f.read(PEEK_BYTES))
        except OSError:
            return None


def _record(data: bytes, path: Path) -> Record:
    for _, end, record in read_records(data):
        if record is None or end != len(data):
            break
        return record
    raise StateError(f"{path}: damaged (not one whole record)")

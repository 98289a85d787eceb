"""A state directory as the home of an LLM server's conversations (``--state-dir``), bounded.

What a server keeps there (``ID`` a conversation's id, ``[A-Za-z0-9._~-]{1,128}``, its files
named by it as :mod:`.conversation_names` says, case apart; NAME a server's, host-pid):

- ``ID.npz`` (its KV cache: the pool's snapshot) and ``ID.json`` (the tokens that cache holds, the
  last turn's text and token ids and those of the turn it went on from, the turns answered): a
  parked conversation. The ``.json`` is made last, so one that is there is whole (a ``.npz``
  without one, a removal stopped half-way, is removed at the start). A conversation recovered
  from the log of a server that died has a ``.json`` only, its ``tokens`` empty: no cache, its
  next turn prefilled whole.
- ``turns-NAME/``: a server's own folder, locked while it lives: its log of turns
  (:mod:`.conversation_log`) and the files of a park being written, which are moved into the
  directory once the park is logged. Nothing is written anywhere else, so a file being written
  never has a name another conversation's file has; a folder whose server died (its lock free) is
  recovered at the next start (or, for servers sharing the directory, when a conversation is asked
  for that is not there), then removed with whatever was left half-written in it.
- ``.lock`` (a plain server's, :mod:`ortstate.serve.state_dir`) and, for servers sharing the directory,
  ``ID.json.claimed-NAME``: a parked conversation a server took (renamed: the others find it gone).

The directory is bounded: once everything in it (logs included) passes ``max_bytes``, parked
conversations are removed, the least recently used first (by their ``.json``'s modification time,
set to when their last turn ended), one log line each. Methods that touch files run in a thread.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import time
from collections.abc import Collection
from dataclasses import asdict
from pathlib import Path

from ...errors import ServeError
from ...output_files import write_text
from ..log import SEGMENT_BYTES, recover_orphans, sync_dir
from ..state_dir import DirLock, open_state_dir
from .conversation_log import TURNS_PREFIX, Parked, TurnLog, folder_bytes
from .conversation_names import ID_PATTERN, cid_of, stem
from .conversation_recovery import recover

__all__ = ["DEFAULT_MAX_BYTES", "ConversationFiles", "default_max_bytes"]

DEFAULT_MAX_BYTES = 10 << 30
logger = logging.getLogger("ortstate.serve")


def default_max_bytes(folder: Path, held: int) -> int:
    """The bound when none is given: 10 GiB, or what ``folder`` holds (``held`` bytes) plus half
    the free space of its filesystem if that is less."""
    try:
        info = os.statvfs(folder)
    except OSError:
        return DEFAULT_MAX_BYTES
    return min(DEFAULT_MAX_BYTES, held + info.f_bavail * info.f_frsize // 2)


class ConversationFiles:
    """The conversations' files in ``folder`` of server ``name`` (``shared``: with other servers).

    Raises:
        ServeError: the folder cannot be made, written or read, another server holds it, or this
            server's log cannot be started there.
    """

    def __init__(self, folder: Path, name: str, *, shared: bool, max_bytes: int | None = None) -> None:
        self.folder, self.name, self.shared = folder, name, shared
        self._orphans_at = 0.0
        self._dir_lock: DirLock | None
        self._dir_lock, _ = open_state_dir(folder, name, shared)
        try:
            if not shared:  # (shared: another server's park may be between its two moves)
                _rename_earlier_names(folder)
            self.recover_orphans(force=True)
            if not shared:
                _remove_halves(folder)
            parked, held = self._scan()
            self.max_bytes = default_max_bytes(folder, held) if max_bytes is None else max_bytes
            segment = max(4 << 10, min(SEGMENT_BYTES, self.max_bytes // 16))  # the log: a few segments at most
            self.log = TurnLog(folder, name, segment)
            self.log.start()
        except BaseException:
            if self._dir_lock is not None:
                self._dir_lock.release()
            raise
        self._parked = parked  # (not shared) each parked conversation: (last used, bytes), kept up to date
        self._other = held - sum(size for _, size in parked.values())  # (not shared) what is not theirs

    # -- parking ----------------------------------------------------------------------------------
    def private(self, cid: str) -> tuple[Path, Path]:
        """Where a park of ``cid`` writes its ``.npz`` and ``.json`` before they are published."""
        return self.log.folder / f"{stem(cid)}.npz", self.log.folder / f"{stem(cid)}.json"

    def write_meta(self, cid: str, held: Parked, used: float) -> None:
        """Write ``cid``'s private ``.json`` (after its ``.npz``), dated ``used`` (its last turn's end)."""
        meta = self.private(cid)[1]
        write_text(meta, json.dumps(asdict(held)))
        os.utime(meta, (used, used))

    def publish(self, cid: str) -> None:
        """Move ``cid``'s private files into the directory (once its park is logged), ``.json`` last."""
        npz, meta = self.private(cid)
        os.replace(npz, self._file(cid, "npz"))
        os.replace(meta, self._file(cid, "json"))
        sync_dir(self.folder)
        if not self.shared:
            with contextlib.suppress(OSError):
                info = self._file(cid, "json").stat()
                self._parked[cid] = (info.st_mtime, info.st_size + self._file(cid, "npz").stat().st_size)

    def discard(self, cid: str) -> None:
        """Remove ``cid``'s private files (a park that failed)."""
        for path in self.private(cid):
            path.unlink(missing_ok=True)

    # -- restoring --------------------------------------------------------------------------------
    def claim(self, cid: str) -> Path | None:
        """Take ``cid``'s parked ``.json`` for this server (shared: renamed, so another finds it
        gone); where it is now, or None if ``cid`` is not parked (shared: not even once the logs of
        servers that died are recovered)."""
        meta = self._take(cid)
        if meta is None and self.shared and self.recover_orphans():
            meta = self._take(cid)
        return meta

    def read(self, meta: Path) -> Parked:
        """What the claimed ``.json`` ``meta`` holds.

        Raises:
            OSError, ValueError, KeyError, TypeError: it cannot be read, or is not one of ours.
        """
        held = json.loads(meta.read_text())
        parked = Parked(
            [int(t) for t in held["tokens"]],
            held["text"],
            [int(t) for t in held["ids"]],
            int(held.get("turns", 0)),
            held.get("before_text"),
            [int(t) for t in held.get("before_ids", [])],
        )
        for name in ("text", "before_text"):
            if (value := getattr(parked, name)) is not None and not isinstance(value, str):
                raise ValueError(f"{name}: expected a string, got {type(value).__name__}")
        return parked

    def npz(self, cid: str) -> Path:
        return self._file(cid, "npz")

    def unclaim(self, cid: str, meta: Path) -> None:
        """Give a claimed ``.json`` back (a restore that could not be logged)."""
        if self.shared:
            os.replace(meta, self._file(cid, "json"))

    def remove(self, cid: str, meta: Path) -> None:
        """Remove ``cid``'s parked files (``meta``: its claimed ``.json``), the ``.json`` first."""
        meta.unlink(missing_ok=True)
        self._file(cid, "npz").unlink(missing_ok=True)
        if not self.shared:
            self._parked.pop(cid, None)

    def delete(self, cid: str) -> str | None:
        """Remove ``cid``'s parked files: "removed", "busy" (another server sharing the directory
        holds it now), or None (not parked)."""
        meta = self.claim(cid)
        if meta is not None:
            self.remove(cid, meta)
            return "removed"
        if self.shared and any(self.folder.glob(f"{glob.escape(stem(cid))}.json.claimed-*")):
            return "busy"
        return None

    # -- the bound --------------------------------------------------------------------------------
    def evict(self, busy: Collection[str]) -> list[str]:
        """Remove the least recently used parked conversations (not those in ``busy``) until the
        directory holds at most :attr:`max_bytes`; their ids (each logged)."""
        parked, held = self._listing()
        gone = []
        for cid, (_, size) in sorted(parked.items(), key=lambda item: item[1][0]):
            if held <= self.max_bytes:
                break
            if cid in busy or not self._drop(cid):
                continue
            logger.warning(
                "ortstate serve: conversation %s evicted, the least recently used parked one: the state directory "
                "held %d bytes, over --max-parked-bytes %d",
                cid,
                held,
                self.max_bytes,
            )
            held -= size
            gone.append(cid)
        return gone

    def expire(self, ttl: float, busy: Collection[str]) -> list[str]:
        """Remove the parked conversations idle for ``ttl`` seconds (not those in ``busy``); their
        ids (each logged)."""
        parked, _ = self._listing()
        now, gone = time.time(), []
        for cid, (used, _) in parked.items():
            if now - used >= ttl and cid not in busy and self._drop(cid):
                logger.warning(
                    "ortstate serve: conversation %s expired: parked, idle for %.0f s (--conversation-ttl %g)",
                    cid,
                    now - used,
                    ttl,
                )
                gone.append(cid)
        return gone

    def count(self) -> int:
        """How many conversations are parked in the directory (by any server sharing it)."""
        return len(self._listing()[0])

    # -- the directory ----------------------------------------------------------------------------
    def recover_orphans(self, force: bool = False) -> list[str]:
        """Parked conversations from the logs of servers that died, their ids (at most once a second
        unless ``force``: a server sharing the directory looks on every miss).

        Raises:
            ServeError: one cannot be recovered (a full disk): its log stays, to be recovered later.
        """
        if not force and time.monotonic() - self._orphans_at < 1.0:
            return []
        self._orphans_at = time.monotonic()
        try:
            return recover_orphans(self.folder, TURNS_PREFIX, recover)
        except OSError as exc:
            why = exc.strerror or exc
            raise ServeError(f"--state-dir: cannot recover the log of a server that stopped ({why})") from None

    def release(self, remove_log: bool) -> None:
        """Let go of the directory; the log is removed with ``remove_log`` (every conversation is in
        its files)."""
        self.log.close(remove=remove_log)
        if self._dir_lock is not None:
            self._dir_lock.release()

    def _file(self, cid: str, ext: str) -> Path:
        return self.folder / f"{stem(cid)}.{ext}"

    def _take(self, cid: str) -> Path | None:
        meta = self._file(cid, "json")
        if not self.shared:
            return meta if cid in self._parked else None
        claimed = meta.with_name(f"{meta.name}.claimed-{self.name}")
        try:
            meta.rename(claimed)
        except FileNotFoundError:
            return None
        return claimed

    def _drop(self, cid: str) -> bool:
        meta = self._take(cid)
        if meta is None:
            return False
        self.remove(cid, meta)
        return True

    def _listing(self) -> tuple[dict[str, tuple[float, int]], int]:
        """Each parked conversation's (last used, bytes), and the bytes the directory holds."""
        if self.shared:  # the other servers park and remove too
            return self._scan()
        parked = dict(self._parked)  # (threads change it: a copy, made at once)
        return parked, self._other + sum(size for _, size in parked.values()) + self.log.bytes()

    def _scan(self) -> tuple[dict[str, tuple[float, int]], int]:
        used: dict[str, float] = {}
        sizes: dict[str, int] = {}
        held = 0
        with os.scandir(self.folder) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):  # a server's log
                        held += folder_bytes(entry.path)
                        continue
                    info = entry.stat(follow_symlinks=False)
                except OSError:  # gone meanwhile
                    continue
                held += info.st_size
                name, _, ext = entry.name.rpartition(".")
                if ext in ("json", "npz") and (cid := cid_of(name)) is not None:
                    sizes[cid] = sizes.get(cid, 0) + info.st_size
                    if ext == "json":
                        used[cid] = info.st_mtime
        return {cid: (when, sizes[cid]) for cid, when in used.items()}, held


def _rename_earlier_names(folder: Path) -> None:
    """Give the files of an id with capitals, parked by a server that named them by the id itself
    (before :mod:`.conversation_names`), their name: ``.npz`` first, so that a start stopped between
    the two finds the ``.json`` still to rename. Where the id has a ``.json`` under its name already
    (parked since), that is the later state, and the earlier files go."""
    for ext in ("npz", "json"):
        for path in folder.glob(f"*.{ext}"):
            cid = path.stem
            if cid_of(cid) is not None or not ID_PATTERN.fullmatch(cid):  # named as now, or no id's
                continue
            if (folder / f"{stem(cid)}.json").exists():
                path.unlink(missing_ok=True)
            else:
                path.replace(folder / f"{stem(cid)}.{ext}")


def _remove_halves(folder: Path) -> None:
    """Remove every ``.npz`` of a conversation whose ``.json`` is not there: a removal (eviction,
    expiry, delete, restore) stopped between its two files; counted in the bound, never evicted."""
    for npz in folder.glob("*.npz"):
        if cid_of(npz.stem) is not None and not npz.with_suffix(".json").exists():
            logger.warning("ortstate serve: %s removed: a conversation's cache without its .json", npz.name)
            npz.unlink(missing_ok=True)

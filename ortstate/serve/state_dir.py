"""The state directory a server parks streams in: checked at start by writing to it, and held by
one plain server at a time.

Two plain servers on one directory would each take the other's parked streams for their own (one
acknowledges a ``close`` of a stream the other holds, which lives on), so a plain server holds an
exclusive ``flock`` on ``DIR/.lock`` (its pid written in it) for as long as it runs; the kernel
releases it when the process ends, however it ends. Servers that share a directory on purpose (Ray
Serve's replicas, ``shared=True``) take no lock: they claim each parked file by renaming it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ..errors import ServeError

__all__ = ["LOCK_NAME", "DirLock", "check_writable", "open_state_dir"]

LOCK_NAME = ".lock"
_OPEN = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


def check_writable(folder: Path, name: str) -> None:
    """Write a probe file in ``folder``, sync it, rename it and remove it, as parking does.

    Raises:
        ServeError: one of those failed (read-only, full, no permission, not a folder), saying which.
    """
    probe, renamed = folder / f".probe-{name}", folder / f".probe-{name}.renamed"
    step = "create a file"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _OPEN, 0o600)
        try:
            step = "write a file"
            os.write(fd, b"ortstate: can streams be parked here?\n")
            step = "sync a file"
            os.fsync(fd)
        finally:
            os.close(fd)
        step = "rename a file"
        os.replace(probe, renamed)
        step = "remove a file"
        os.unlink(renamed)
    except OSError as exc:
        for left in (probe, renamed):
            with contextlib.suppress(OSError):
                left.unlink()
        raise ServeError(f"--state-dir {folder} is not writable: cannot {step} there ({exc.strerror or exc})") from None


class DirLock:
    """The exclusive lock of one plain server on its state directory."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write this process's pid in it.

        Raises:
            ServeError: another server holds it (its pid named), or the lock file cannot be made.
        """
        folder = self.path.parent
        try:
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _OPEN, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                    os.close(fd)
                    raise ServeError(
                        f"--state-dir {folder} is in use by another server (pid {holder}): one server per "
                        "state directory; stop that one, or give this one a directory of its own"
                    ) from None
                try:  # the file may have been removed by a server stopping meanwhile: lock the new one
                    if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                        break
                except FileNotFoundError:
                    pass
                os.close(fd)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            raise ServeError(f"--state-dir {folder}: cannot lock {self.path.name} ({exc.strerror or exc})") from None
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (the file removed first, so no server locks a file on its way out)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def open_state_dir(folder: Path, name: str, shared: bool) -> tuple[DirLock | None, list[str]]:
    """Make ``folder`` (mode 700) if missing, check it is writable (``name``: this server's, for the
    probe file) and, unless ``shared``, lock it; the lock and the names of the snapshots there.

    Raises:
        ServeError: it cannot be made, written or read, or another server holds it.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ServeError(f"--state-dir {folder}: {exc.strerror or exc}") from None
    check_writable(folder, name)
    lock = None if shared else DirLock(folder)
    if lock is not None:
        lock.acquire()
    try:
        return lock, [p.stem for p in folder.glob("*.npz")]
    except OSError as exc:
        if lock is not None:
            lock.release()
        raise ServeError(f"--state-dir {folder}: {exc.strerror or exc}") from None

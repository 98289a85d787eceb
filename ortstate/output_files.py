"""Every file ortstate writes goes through here: a converted model and its ``.data`` file, a state
snapshot, an export folder, bench's results, run's outputs.

A file is written to a temporary file beside its target (the same folder, so the rename stays on
one filesystem), flushed, fsync'ed, and renamed over the target with ``os.replace``: the target
holds its previous content or the whole new one, never part of it, and a write that fails leaves
no temporary file behind. Files that belong together (a model and its ``.data``) are staged in one
:class:`OutputFiles` and replace their targets only once every one of them is written. A symlink
is followed (its target is replaced, the link stays); an existing target that is no regular file
(``/dev/null``, a terminal, a FIFO) is written in place (made in memory first), as a shell
redirect would, since there is nothing there to replace and a device must not become a file.

Every ``OSError`` becomes an :class:`~ortstate.errors.OutputFileError` whose message names the path
as given and the reason (errno's text): ``out/m.onnx: cannot be written (No space left on device)``.
"""

from __future__ import annotations

import errno
import io
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from .errors import OutputFileError

__all__ = [
    "OutputFiles",
    "check_folder",
    "check_writable",
    "make_folder",
    "output_error",
    "remove_folders",
    "write_bytes",
    "write_file",
    "write_text",
]

Fill = Callable[[BinaryIO], object]
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def output_error(path: str | os.PathLike[str], exc: OSError | int) -> OutputFileError:
    """The error for ``path``, from an ``OSError`` or an errno."""
    reason = os.strerror(exc) if isinstance(exc, int) else exc.strerror or str(exc)
    return OutputFileError(f"{os.fspath(path)}: cannot be written ({reason})")


class OutputFiles:
    """Files written together: each to a temporary file beside its target as it is written, and
    all renamed over their targets by :meth:`commit`. Used as a context manager it commits when the
    block ends normally and discards every temporary file when it raises."""

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path, str]] = []  # (temporary, target, the path as given)
        self._removals: list[Path] = []

    def __enter__(self) -> OutputFiles:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()

    def write(self, path: str | os.PathLike[str], fill: Fill) -> None:
        """Write ``path`` with ``fill(file)`` (a binary file object) into a temporary file beside it.

        Raises:
            OutputFileError: ``path`` is a directory, its folder is missing, not a folder, read-only
                or full; nothing of this file is left behind (files written before stay staged).
        """
        shown, target, info = _target(path)
        if info is not None and not stat.S_ISREG(info.st_mode):
            _write_in_place(shown, target, fill)
            return
        # (a name near the 255-byte limit still leaves room for the temporary file's)
        temporary = target.with_name(f".{target.name[:200]}.{secrets.token_hex(4)}.tmp")
        try:  # O_EXCL: never into a file someone else made
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o666)
        except OSError as exc:
            raise output_error(shown, exc) from None
        try:
            with os.fdopen(fd, "wb") as f:
                if info is not None:  # a replaced file keeps its permissions
                    os.fchmod(f.fileno(), stat.S_IMODE(info.st_mode))
                fill(f)
                f.flush()
                os.fsync(f.fileno())
        except BaseException as exc:
            _unlink(temporary)
            if isinstance(exc, OSError):
                raise output_error(shown, exc) from None
            raise
        self._staged.append((temporary, target, shown))

    def remove(self, path: str | os.PathLike[str]) -> None:
        """Remove ``path`` when committing, if it is a regular file (a file the ones written make
        stale, such as an earlier model's ``.data``); a symlink or anything else there stays."""
        self._removals.append(Path(path))

    def commit(self) -> None:
        """Rename every staged file over its target, then make the removals.

        Raises:
            OutputFileError: a rename failed (the target turned into a directory meanwhile, say);
                the files not yet renamed are discarded.
        """
        folders = set()
        try:
            while self._staged:
                temporary, target, shown = self._staged[0]
                try:
                    os.replace(temporary, target)
                except OSError as exc:
                    raise output_error(shown, exc) from None
                self._staged.pop(0)
                folders.add(target.parent)
            for path in self._removals:
                if path.is_file() and not path.is_symlink():
                    try:
                        path.unlink()
                    except OSError as exc:
                        raise output_error(path, exc) from None
        finally:
            self.discard()
        for folder in folders:  # the renames themselves survive a crash only once their folder is synced
            _sync_folder(folder)

    def discard(self) -> None:
        """Remove every staged temporary file; the targets stay as they were."""
        for temporary, _, _ in self._staged:
            _unlink(temporary)
        self._staged.clear()
        self._removals.clear()


def write_file(path: str | os.PathLike[str], fill: Fill) -> None:
    """Write one file with ``fill(file)`` safely (see the module docstring).

    Raises:
        OutputFileError: it cannot be written; the previous file, if any, is left as it was.
    """
    with OutputFiles() as files:
        files.write(path, fill)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` safely. Raises :class:`OutputFileError`."""
    write_file(path, lambda f: f.write(data))


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` safely. Raises :class:`OutputFileError`."""
    write_bytes(path, text.encode("utf-8"))


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse, before any long work, a file that could not be written: ``path`` is a directory, or
    its folder is missing, not a folder, or not writable. A full disk shows only when writing.

    Raises:
        OutputFileError: naming ``path`` and the reason.
    """
    shown, target, info = _target(path)
    if info is not None and not stat.S_ISREG(info.st_mode):
        return  # a device or FIFO: written in place
    _check_folder(shown, target.parent)


def check_folder(path: str | os.PathLike[str]) -> None:
    """Refuse a folder that files could not be written into: ``path`` is something else, or, if it
    is missing, the folder it would be made in is not a folder or not writable.

    Raises:
        OutputFileError: naming ``path`` and the reason.
    """
    folder = Path(path)
    existing = folder
    while True:
        try:
            info = os.stat(existing)
            break
        except FileNotFoundError:
            if existing.parent == existing:
                raise output_error(folder, errno.ENOENT) from None
            existing = existing.parent
        except OSError as exc:
            raise output_error(folder, exc) from None
    if not stat.S_ISDIR(info.st_mode):
        raise output_error(folder, errno.ENOTDIR)
    _check_folder(folder, existing)


def make_folder(path: str | os.PathLike[str]) -> list[Path]:
    """Make folder ``path`` and its missing parents; the folders made, outermost first (for
    :func:`remove_folders` to undo when what goes into them fails).

    Raises:
        OutputFileError: a part of ``path`` is a file, or a folder cannot be made there.
    """
    folder = Path(path)
    missing = []
    current = folder
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    made: list[Path] = []
    for part in reversed(missing):
        try:
            part.mkdir()
        except FileExistsError:
            if not part.is_dir():
                raise output_error(folder, errno.ENOTDIR) from None
        except OSError as exc:
            remove_folders(made)
            raise output_error(folder, exc) from None
        else:
            made.append(part)
    return made


def remove_folders(folders: list[Path]) -> None:
    """Remove the folders :func:`make_folder` made, innermost first, those still empty."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            return


def _target(path: str | os.PathLike[str]) -> tuple[str, Path, os.stat_result | None]:
    """``path`` as given (for messages), the file to write (symlinks followed) and its stat (None
    when there is none yet).

    Raises:
        OutputFileError: ``path`` is a directory.
    """
    shown = os.fspath(path)
    target = Path(os.path.realpath(shown))
    try:
        info = os.stat(target)
    except OSError:
        return shown, target, None  # missing, or its folder is: the write says which
    if stat.S_ISDIR(info.st_mode):
        raise output_error(shown, errno.EISDIR)
    return shown, target, info


def _check_folder(shown: str, folder: Path) -> None:
    try:
        info = os.stat(folder)
    except OSError as exc:
        raise output_error(shown, exc) from None
    if not stat.S_ISDIR(info.st_mode):
        raise output_error(shown, errno.ENOTDIR)
    if not os.access(folder, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        raise output_error(shown, errno.EROFS if read_only else errno.EACCES)


def _write_in_place(shown: str, target: Path, fill: Fill) -> None:
    """Into a device or FIFO: made in memory first (a format such as zip seeks back as it writes,
    which a device cannot), then written out."""
    buffer = io.BytesIO()
    fill(buffer)
    data = memoryview(buffer.getbuffer())
    try:
        fd = os.open(target, os.O_WRONLY | _O_CLOEXEC)
        try:
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
    except OSError as exc:
        raise output_error(shown, exc) from None


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # the folder turned read-only meanwhile: nothing more can be done


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | _O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot sync a directory; the data itself was synced
    finally:
        os.close(fd)

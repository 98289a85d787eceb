"""Every file ortstate writes, against every way a write fails (``ortstate/output_files.py``).

Each writer (API and command line) is run where its files cannot be written: a missing folder, a
folder that is a file, a directory where its file goes, a read-only folder, a full disk. It must
raise :class:`~ortstate.OutputFileError` (the command line: one line, exit code 2) naming the path
and errno's reason, and leave the files exactly as they were: no temporary file, no part of a
file, every earlier file (a previous good one) intact, no folder it made.

Real failures where the machine allows them: a read-only folder is a folder without write
permission, or (as root, whom permissions do not stop) a tmpfs mounted read-only; a full disk is a
small tmpfs filled up. Where ``mount`` is not allowed those cases are skipped, saying so, and the
simulated variants (``os.open`` refusing with EACCES, ``fsync`` failing with ENOSPC after the data
went out) run everywhere.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from oracle import REPO

import ortstate
from ortstate.cli import main
from ortstate.convert import external
from ortstate.output_files import OutputFiles, write_bytes

ACCUMULATOR = REPO / "models" / "accumulator" / "model.xml"
CHAR_LSTM = REPO / "ortstate" / "_demo" / "char_lstm.xml"  # weights large enough for a .data file
LLAMA = REPO / "models" / "llm" / "llama"
EXPORTED = ("model.onnx", "genai_config.json")  # what exporting LLAMA writes (its tokenizer genai misreads: left out)
X = np.ones((1, 3), np.float32)


@dataclass(frozen=True)
class Writer:
    """One thing that writes files into ``folder``.

    Attributes:
        files: the files it writes there, in the order it writes them.
        makes_folder: a missing folder is made (export's and run's output folders), not an error.
        in_the_way: where a directory makes its last file unwritable (default: that file itself).
    """

    name: str
    write: Callable[[Path, Path], str | None]  # (folder, scratch) -> the error message, None if written
    files: tuple[str, ...]
    makes_folder: bool = False
    in_the_way: str = ""


def _api(call: Callable[[], object]) -> str | None:
    try:
        call()
    except ortstate.OutputFileError as exc:
        return str(exc)
    return None


def _cli(*argv: object) -> str | None:
    """``ortstate ARGV`` in this process: None on success, else its one-line error (exit code 2)."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    if code == 0:
        return None
    text = err.getvalue()
    lines = [line for line in text.splitlines() if line.startswith("ortstate: error: ")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in text, (code, text)
    return lines[0].removeprefix("ortstate: error: ")


def _save_state(folder: Path, scratch: Path) -> str | None:
    session = ortstate.StatefulSession(ACCUMULATOR)
    session.run(None, {"x": X})
    return _api(lambda: session.save_state(folder / "state.npz"))


def _convert_with_data(folder: Path, scratch: Path) -> str | None:
    saved = external.EXTERNAL_ABOVE
    external.EXTERNAL_ABOVE = 0  # every large initializer into m.onnx.data
    try:
        return _api(lambda: ortstate.convert(CHAR_LSTM, folder / "m.onnx"))
    finally:
        external.EXTERNAL_ABOVE = saved


def _bench(option: str, name: str) -> Callable[[Path, Path], str | None]:
    def write(folder: Path, scratch: Path) -> str | None:
        argv = ["bench", ACCUMULATOR, "--steps", 1, "--rounds", 1, "--no-openvino", f"--{option}", folder / name]
        return _cli(*argv)

    return write


def _run(folder: Path, scratch: Path) -> str | None:
    np.save(scratch / "x.npy", X)
    return _cli("run", ACCUMULATOR, "--input", f"x={scratch / 'x.npy'}", "--output-dir", folder)


WRITERS = [
    Writer("save_state", _save_state, ("state.npz",)),
    Writer("convert", lambda folder, _: _api(lambda: ortstate.convert(ACCUMULATOR, folder / "m.onnx")), ("m.onnx",)),
    Writer("convert with .data", _convert_with_data, ("m.onnx.data", "m.onnx")),
    # -o DIR writes DIR/model.onnx: the directory in the way is that file
    Writer("cli convert -o", lambda f, _: _cli("convert", ACCUMULATOR, "-o", f / "m.onnx"), ("m.onnx",),
           in_the_way="m.onnx/model.onnx"),
    Writer("export", lambda f, _: _api(lambda: ortstate.export(LLAMA, f)), EXPORTED, True),
    Writer("cli export", lambda f, _: _cli("export", LLAMA, f), EXPORTED, True),
    Writer("cli bench --json", _bench("json", "b.json"), ("b.json",)),
    Writer("cli bench --markdown", _bench("markdown", "b.md"), ("b.md",)),
    Writer("cli bench --plot", _bench("plot", "b.png"), ("b.png",)),
    Writer("cli run --output-dir", _run, ("step1_sum.npy",), True),
]  # fmt: skip


# -- the failure kinds: each makes the folder (and what is already in it), and says what must fail ---
@dataclass
class Failure:
    folder: Path
    reason: str  # errno's text the error must give; "" when the write must succeed


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a folder)."""
    out: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        out[str(path.relative_to(root))] = None if path.is_dir() and not path.is_symlink() else path.read_bytes()
    return out


def _previous(folder: Path, writer: Writer) -> None:
    """Earlier good files where the writer's files go, each with its own content."""
    for name in writer.files:
        (folder / name).write_bytes(f"previous {name}\n".encode())


def _mount_tmpfs(folder: Path, request: pytest.FixtureRequest, size: str) -> bool:
    """A small tmpfs on ``folder`` (unmounted after the test), if this process may mount one."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)], capture_output=True
    )
    if done.returncode != 0:
        return False

    def unmount() -> None:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)

    request.addfinalizer(unmount)
    return True


def _fill(folder: Path) -> None:
    """Fill the filesystem of ``folder`` until not one more byte fits."""
    with open(folder / "filler", "wb", buffering=0) as f:
        block = b"\0" * 4096
        while True:
            try:
                f.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        while True:
            try:
                f.write(b"\0")
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return


def missing_folder(
    base: Path, writer: Writer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Failure:
    return Failure(base / "no" / "out", "" if writer.makes_folder else "No such file or directory")


def folder_is_a_file(
    base: Path, writer: Writer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Failure:
    (base / "file").write_bytes(b"a file\n")
    return Failure(base / "file", "Not a directory")


def directory_in_the_way(
    base: Path, writer: Writer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Failure:
    folder = base / "out"
    folder.mkdir()
    _previous(folder, writer)
    (folder / writer.files[-1]).unlink()
    (folder / (writer.in_the_way or writer.files[-1])).mkdir(parents=True)
    return Failure(folder, "Is a directory")


def read_only_folder(
    base: Path, writer: Writer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Failure:
    folder = base / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        _previous(folder, writer)
        folder.chmod(0o555)
        request.addfinalizer(lambda: folder.chmod(0o755))
        return Failure(folder, "Permission denied")
    if not _mount_tmpfs(folder, request, "1m"):
        pytest.skip("running as root, whom permissions do not stop, and no tmpfs can be mounted read-only here")
    _previous(folder, writer)
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    return Failure(folder, "Read-only file system")


def read_only_simulated(
    base: Path, writer: Writer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Failure:
    """``os.open`` refuses to create anything in the folder, as a folder without write permission does."""
    folder = base / "ro"
    folder.mkdir()
    _previous(folder, writer)
    real_open = os.open

    def refuse(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & os.O_CREAT and Path(os.fspath(path)).resolve().parent == folder.resolve():  # type: ignore[arg-type]
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))  # type: ignore[arg-type]
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refuse)
    return Failure(folder, "Permission denied")


def disk_full(base: Path, writer: Writer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Failure:
    folder = base / "full"
    folder.mkdir()
    if not _mount_tmpfs(folder, request, "256k"):
        pytest.skip("no tmpfs can be mounted here to fill up (not root, or mount not allowed)")
    _previous(folder, writer)
    _fill(folder)
    return Failure(folder, "No space left on device")


def disk_full_simulated(
    base: Path, writer: Writer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Failure:
    """The data goes out, then ``fsync`` reports ENOSPC (as filesystems that allocate late do)."""
    folder = base / "full"
    folder.mkdir()
    _previous(folder, writer)
    real_fsync = os.fsync

    def full(fd: int) -> None:
        if Path(os.readlink(f"/proc/self/fd/{fd}")).parent == folder.resolve():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    return Failure(folder, "No space left on device")


FAILURES = [
    missing_folder,
    folder_is_a_file,
    directory_in_the_way,
    read_only_folder,
    read_only_simulated,
    disk_full,
    disk_full_simulated,
]


@pytest.mark.parametrize("failure", FAILURES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w.name)
def test_a_write_that_fails_leaves_everything_as_it_was(
    writer: Writer,
    failure: Callable[..., Failure],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base, scratch = tmp_path / "base", tmp_path / "scratch"
    base.mkdir()
    scratch.mkdir()
    made = failure(base, writer, request, monkeypatch)
    before = _tree(base)
    message = writer.write(made.folder, scratch)
    monkeypatch.undo()
    if not made.reason:  # the writer makes its folder
        assert message is None
        after = _tree(base)
        assert sorted(after) == sorted({*before, "no", "no/out", *(f"no/out/{n}" for n in writer.files)})
        assert all(after[f"no/out/{n}"] for n in writer.files)
        return
    assert message is not None, "the write did not fail"
    named = re.fullmatch(rf"(?:--\w+ )?(\S+): cannot be written \({re.escape(made.reason)}\)", message)
    assert named, message
    assert named.group(1) in {str(made.folder), *(str(made.folder / n) for n in (*writer.files, writer.in_the_way))}
    assert _tree(base) == before  # no temporary file, no part of a file, earlier files intact, no folder made


# -- devices, links, several files ----------------------------------------------------------------
DEVICE_WRITERS = [w for w in WRITERS if len(w.files) == 1 and not w.makes_folder]


@pytest.mark.parametrize("writer", DEVICE_WRITERS, ids=lambda w: w.name)
def test_a_device_is_written_in_place_never_replaced(writer: Writer, tmp_path: Path) -> None:
    """/dev/full refuses every byte (ENOSPC, a real full disk); /dev/null takes them all. Neither
    becomes a file: a temporary file renamed over a device would replace it."""
    devices = tmp_path / "dev"
    devices.mkdir()
    (devices / writer.files[0]).symlink_to("/dev/full")
    message = writer.write(devices, tmp_path)
    assert message is not None and message.endswith(
        f"{devices / writer.files[0]}: cannot be written (No space left on device)"
    )
    (devices / writer.files[0]).unlink()
    (devices / writer.files[0]).symlink_to("/dev/null")
    assert writer.write(devices, tmp_path) is None
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in devices.iterdir()) == [writer.files[0]]
    assert sorted(p.name for p in Path("/dev").glob(".full.*")) == []


def test_a_link_is_followed_and_kept(tmp_path: Path) -> None:
    real = tmp_path / "real.onnx"
    real.write_bytes(b"old")
    (tmp_path / "link.onnx").symlink_to(real.name)
    ortstate.convert(ACCUMULATOR, tmp_path / "link.onnx")
    assert (tmp_path / "link.onnx").is_symlink() and real.read_bytes().startswith(b"\x08")  # ir_version field
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.onnx", "real.onnx"]


def test_files_written_together_replace_their_targets_together(tmp_path: Path) -> None:
    """A model and its data: the second failing (or interrupted) leaves the first target as it was."""
    first, second = tmp_path / "m.onnx.data", tmp_path / "m.onnx"
    first.write_bytes(b"old data")
    for problem in (OSError(errno.EIO, "I/O error"), KeyboardInterrupt()):

        def fail(f: object, problem: BaseException = problem) -> None:
            raise problem

        with pytest.raises((ortstate.OutputFileError, KeyboardInterrupt)):
            with OutputFiles() as files:
                files.write(first, lambda f: f.write(b"new data"))
                files.write(second, fail)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx.data"]
        assert first.read_bytes() == b"old data"
    with OutputFiles() as files:
        files.write(first, lambda f: f.write(b"new data"))
        files.write(second, lambda f: f.write(b"model"))
    assert (first.read_bytes(), second.read_bytes()) == (b"new data", b"model")


def test_a_replaced_file_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(b"{}")
    path.chmod(0o640)
    write_bytes(path, b"[]")
    assert (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) == (b"[]", 0o640)

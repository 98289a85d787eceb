"""The state directory (serve/state_dir.py): one that cannot be written is refused at start in one
line; one plain server per directory (a second names the holder's pid), servers that share one on
purpose take no lock; a disk that fills before shutdown loses only the streams it must, each named,
and the exit code says so."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from conftest import MODEL, Lone, assert_same, feeds, running, serving
from oracle import assert_one_line_error, run_cli

from ortstate.errors import ServeError
from ortstate.serve import Client


def _serve(capsys, state_dir: Path | str) -> tuple[int, str, str]:
    return run_cli(capsys, "serve", MODEL, "--port", "0", "--state-dir", state_dir)


def test_a_state_dir_that_cannot_be_written_is_refused_at_start(capsys, tmp_path):
    kernel = Path("/sys/kernel")  # a folder not even root can write in
    if not kernel.is_dir():
        pytest.skip("no /sys/kernel on this machine")
    code, out, err = _serve(capsys, kernel)
    assert (code, out) == (2, "")
    assert_one_line_error(
        err, "--state-dir /sys/kernel is not writable: cannot create a file there (Permission denied)"
    )

    (tmp_path / "file").write_text("a file where the folder should be")
    code, out, err = _serve(capsys, tmp_path / "file")
    assert (code, out) == (2, "")
    assert_one_line_error(err, f"--state-dir {tmp_path / 'file'}: File exists")


@pytest.mark.parametrize(
    ("call", "errno_", "step"),
    [
        ("open", errno.EROFS, "create a file"),
        ("fsync", errno.ENOSPC, "sync a file"),
        ("replace", errno.EIO, "rename a file"),
    ],
)
def test_a_read_only_or_full_state_dir_is_refused_at_start(capsys, tmp_path, monkeypatch, call, errno_, step):
    real = getattr(os, call)

    def failing(*args, **kwargs):
        if call != "open" or ".probe-" in str(args[0]):
            raise OSError(errno_, os.strerror(errno_))
        return real(*args, **kwargs)

    monkeypatch.setattr(os, call, failing)
    code, out, err = _serve(capsys, tmp_path)
    monkeypatch.undo()
    assert (code, out) == (2, "")
    assert_one_line_error(err, f"--state-dir {tmp_path} is not writable: cannot {step} there ({os.strerror(errno_)})")
    assert list(tmp_path.iterdir()) == []  # no probe left behind


def test_one_plain_server_per_state_dir(capsys, tmp_path):
    with serving("--state-dir", str(tmp_path)) as (proc, url):
        assert (tmp_path / ".lock").read_text() == f"{proc.pid}\n"
        code, out, err = _serve(capsys, tmp_path)
        assert (code, out) == (2, "")
        assert_one_line_error(
            err,
            f"--state-dir {tmp_path} is in use by another server (pid {proc.pid}): one server per state "
            "directory; stop that one, or give this one a directory of its own",
        )
        with (
            pytest.raises(ServeError, match=rf"is in use by another server \(pid {proc.pid}\)"),
            running(state_dir=tmp_path),
        ):
            pass
        stream = Client(url).open()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{stream.id}.npz"]  # the lock let go
    with running(state_dir=tmp_path) as server:  # the next server takes the directory and its streams
        assert server.service.where(stream.id) == "parked"
        with (
            pytest.raises(ServeError, match=rf"is in use by another server \(pid {os.getpid()}\)"),
            running(state_dir=tmp_path),
        ):
            pass


def test_servers_sharing_a_state_dir_take_no_lock(tmp_path):
    with running(state_dir=tmp_path, shared=True) as a, running(state_dir=tmp_path, shared=True) as b:
        stream = Client(a.url).open()
        assert b.service.where(stream.id) == "parked"
        assert [p.name for p in tmp_path.iterdir()] == [f"{stream.id}.npz"]


# ``ortstate serve`` on a disk that fills up after N snapshots: every fsync of a snapshot past the
# Nth fails with ENOSPC, as a full disk's would (the probe at start still passes).
FILLING_DISK = """
import errno, os, sys
real, synced = os.fsync, [0]
def fsync(fd):
    if ".npz." in os.readlink(f"/proc/self/fd/{fd}"):
        synced[0] += 1
        if synced[0] > int(os.environ["SNAPSHOTS_THAT_FIT"]):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(fd)
os.fsync = fsync
from ortstate.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_full_disk_at_shutdown_loses_only_what_it_must_and_says_so(tmp_path):
    rng = np.random.default_rng(40)
    env = {**os.environ, "SNAPSHOTS_THAT_FIT": "1"}
    lones = [Lone() for _ in range(3)]
    with serving("--state-dir", str(tmp_path), prelude=FILLING_DISK, env=env) as (proc, url):
        streams = [Client(url).open() for _ in lones]
        for stream, lone in zip(streams, lones):
            fed = feeds(rng)
            assert_same(stream.step(fed), lone.step(fed))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert out.splitlines()[-1] == f"ortstate serve: stopped; 1 stream parked in {tmp_path}"
    lost = [s.id for s in streams[1:]]  # parked in the order they opened: the first fit
    assert err.splitlines() == [
        *(
            f"ortstate serve: stream {i} cannot be parked, its state is lost: "
            f"{tmp_path / i}.npz: cannot be written (No space left on device)"
            for i in lost
        ),
        f"ortstate: error: 2 streams could not be parked in {tmp_path}: lost",
    ]
    assert [p.name for p in tmp_path.iterdir()] == [f"{streams[0].id}.npz"]  # nothing half-written
    with running(state_dir=tmp_path) as server:  # the one parked continues exactly
        fed = feeds(rng)
        assert_same(Client(server.url).stream(streams[0].id).step(fed), lones[0].step(fed), "after the restart")
        assert not server.service.knows(lost[0])

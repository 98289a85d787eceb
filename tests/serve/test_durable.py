"""``--durable``: no step a client was answered is lost or wrong when the server is SIGKILLed, its
log's torn tail is dropped, a log that cannot be written acknowledges nothing, compaction keeps
every stream."""

from __future__ import annotations

import asyncio
import errno
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import MODEL, Lone, assert_same, feeds, free_port, running, serving

import ortstate
from ortstate.errors import ServeError
from ortstate.serve import AsyncClient, Client
from ortstate.serve import log as log_module
from ortstate.serve.log_format import LIVE, Record, read_records
from ortstate.serve.streams.journal import Journal, recover_journals

STREAMS, KILLS = 64, 20


def test_sigkill_at_random_moments_loses_no_acknowledged_step(tmp_path):
    """64 streams step without pause while the server is SIGKILLed at 20 random moments and started
    again on the same directory: every reply each stream got is a lone session's, in order (none
    lost, none made twice), and the server's step count of each is the client's."""
    port = free_port()
    rngs = [np.random.default_rng(40 + k) for k in range(STREAMS)]
    plans: list[list[dict[str, np.ndarray]]] = [[] for _ in range(STREAMS)]
    got: list[list[dict[str, np.ndarray]]] = [[] for _ in range(STREAMS)]
    stop = threading.Event()
    args = ("--state-dir", str(tmp_path / "state"), "--durable", "--port", str(port), "--max-delay-ms", "1")

    def killer() -> None:
        chance = random.Random(41)
        for _ in range(KILLS):
            with serving(*args) as (proc, _):
                time.sleep(chance.uniform(0.1, 0.6))
                proc.send_signal(signal.SIGKILL)
        with serving(*args) as (proc, _):
            stop.set()
            drivers.join(120)
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)

    async def drive() -> list[int | None]:
        client = AsyncClient(f"http://127.0.0.1:{port}", timeout=60)
        while True:  # the first server may still be starting
            try:
                streams = [await client.open() for _ in range(STREAMS)]
                break
            except ServeError:
                await asyncio.sleep(0.05)

        async def one(k: int) -> None:
            while not stop.is_set():  # until the last server is up: the kills come meanwhile
                plans[k].append(feeds(rngs[k]))
                got[k].append(await streams[k].step(plans[k][-1]))

        await asyncio.gather(*map(one, range(STREAMS)))
        steps = [(await client.where(s.id))["steps"] for s in streams]
        for s in streams:
            await s.disconnect()
        return steps

    result: list = []
    failed: list[str] = []

    def reported(work) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - the test says what failed
            failed.append(f"{type(exc).__name__}: {exc}")
            stop.set()

    drivers = threading.Thread(target=reported, args=(lambda: result.append(asyncio.run(drive())),), daemon=True)
    kills = threading.Thread(target=reported, args=(killer,), daemon=True)
    kills.start()
    drivers.start()
    kills.join(600)
    drivers.join(60)
    assert not failed and result, failed
    assert sum(map(len, got)) > STREAMS * KILLS  # they stepped between the kills
    for k in range(STREAMS):
        lone = Lone()
        for n, outputs in enumerate(got[k]):
            assert_same(outputs, lone.step(plans[k][n]), f"stream {k}, step {n}")
    assert result[0] == [len(g) for g in got]


def _pool() -> ortstate.StreamPool:
    return ortstate.StreamPool(MODEL, slots=8)


def _stepped(pool: ortstate.StreamPool, journal: Journal, names: list[str], rng: np.random.Generator) -> dict:
    """Open a stream per name, step each twice, logging as the server does; the feeds."""
    fed = {}
    for name in names:
        sid = pool.open()
        journal.bind(name, sid)
        journal.note(name, LIVE, sid)
        journal.commit({})
        fed[name] = [feeds(rng), feeds(rng)]
        for f in fed[name]:
            journal.commit({sid: pool.step({sid: f})[sid]})
    return fed


def _parked(state_dir, name: str) -> Record:
    data = (state_dir / f"{name}.rec").read_bytes()
    ((_, end, record),) = list(read_records(data))
    assert end == len(data) and record is not None
    return record


def _check(record: Record, fed: list[dict[str, np.ndarray]]) -> None:
    """``record`` holds a lone session's stream after ``fed``: its steps, state and last outputs."""
    lone = Lone()
    outs = [lone.step(f) for f in fed]
    assert record.steps == len(fed)
    assert_same(record.outputs, outs[-1], record.stream)
    for got, var in zip(record.states, lone.request.query_state()):
        np.testing.assert_allclose(got, var.state, rtol=1e-6, atol=1e-6)


def test_a_dead_servers_log_becomes_parked_streams_and_its_torn_tail_is_dropped(tmp_path, caplog):
    rng = np.random.default_rng(42)
    pool, names = _pool(), ["a" * 22, "b" * 22]
    journal = Journal(tmp_path, "dead-1", pool)
    journal.start()
    fed = _stepped(pool, journal, names, rng)
    (segment,) = (tmp_path / "journal-dead-1").glob("seg-*.log")
    journal.close(remove=False)  # as a kill leaves it: the lock let go, the log there
    extra = Record(LIVE, names[0], 3, [None, None]).encode()
    with open(segment, "ab") as f:
        f.write(extra[: len(extra) // 2])  # a write the kill cut short
    with caplog.at_level("WARNING", logger="ortstate.serve"):
        assert sorted(recover_journals(tmp_path)) == names
    assert "dropped the last record (torn by the stop; never acknowledged)" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.rec" for n in names)
    for name in names:
        _check(_parked(tmp_path, name), fed[name])


def test_a_live_servers_log_is_left_alone(tmp_path):
    journal = Journal(tmp_path, "alive-1", _pool())
    journal.start()
    _stepped(journal.pool, journal, ["c" * 22], np.random.default_rng(45))
    assert recover_journals(tmp_path) == []  # its lock is held
    journal.close(remove=True)
    assert list(tmp_path.iterdir()) == []


def test_a_log_that_cannot_be_written_acknowledges_nothing(tmp_path, monkeypatch):
    """A full disk during a step: the client is told the step was not made, and it was not: the next
    step (once the disk has room) gives what a lone session's next step gives."""
    rng = np.random.default_rng(43)
    lone = Lone()
    with running(state_dir=tmp_path, durable=True) as server:
        stream = Client(server.url).open()
        fed = [feeds(rng)]
        assert_same(stream.step(fed[0]), lone.step(fed[0]))
        real = log_module._write_all

        def full(fd: int, data: bytes) -> None:
            real(fd, data[: len(data) // 3])  # part of it went out: it must be cut back
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(log_module, "_write_all", full)
        with pytest.raises(ServeError, match=r"cannot write the log \(No space left on device\); the step was not"):
            stream.step(feeds(rng))
        monkeypatch.setattr(log_module, "_write_all", real)
        fed.append(feeds(rng))
        assert_same(stream.step(fed[1]), lone.step(fed[1]), "after the failed step")
        assert Client(server.url).where(stream.id)["steps"] == 2
    _check(_parked(tmp_path, stream.id), fed)  # parked at the stop, the log gone
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{stream.id}.rec"]


def test_a_park_whose_log_cannot_be_written_keeps_the_stream(tmp_path, monkeypatch, caplog):
    """A full disk while idle streams are parked: the park fails (logged, tried again later) and the
    stream stays in memory as it was, its steps still logged: its next step is a lone session's."""
    rng = np.random.default_rng(46)
    lone = Lone()
    real = log_module._write_all

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with running(state_dir=tmp_path, durable=True, idle_park=0.2) as server:
        stream = Client(server.url).open()
        fed = [feeds(rng)]
        monkeypatch.setattr(log_module, "_write_all", real)
        assert_same(stream.step(fed[0]), lone.step(fed[0]))
        monkeypatch.setattr(log_module, "_write_all", full)
        with caplog.at_level("WARNING", logger="ortstate.serve"):
            deadline = time.monotonic() + 10
            while "cannot park idle streams" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
        assert "No space left on device" in caplog.text
        assert list(tmp_path.glob("*.parking-*")) == [] and list(tmp_path.glob("*.rec")) == []
        monkeypatch.setattr(log_module, "_write_all", real)
        fed.append(feeds(rng))
        assert_same(stream.step(fed[1]), lone.step(fed[1]), "after the failed park")
        assert Client(server.url).where(stream.id)["steps"] == 2
    _check(_parked(tmp_path, stream.id), fed)  # the log held its steps: parked at the stop


def test_compaction_keeps_every_stream(tmp_path):
    """Segments of a few records: the log is compacted again and again in the background, and what
    is recovered from it is each stream's last step."""
    rng = np.random.default_rng(44)
    pool, names = _pool(), [c * 22 for c in "defgh"]
    journal = Journal(tmp_path, "dead-2", pool, segment_bytes=2048)
    journal.start()
    fed = _stepped(pool, journal, names, rng)
    journal.close(remove=False)
    files = sorted(p.name for p in (tmp_path / "journal-dead-2").iterdir())
    assert len(files) <= 4 and any(f.startswith("checkpoint-") for f in files), files
    assert sorted(recover_journals(tmp_path)) == names
    for name in names:
        _check(_parked(tmp_path, name), fed[name])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--durable"], "--durable needs --state-dir"),
    ],
)
def test_durable_options_are_checked(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "ortstate", "serve", str(MODEL), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

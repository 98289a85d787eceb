"""``--durable``: no step a client was answered is lost or wrong when the server is SIGKILLed, its
log's torn tail is dropped, a log that cannot be written acknowledges nothing, compaction keeps
every stream."""

from __future__ import annotations

import asyncio
import errno
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import MODEL, Lone, assert_same, feeds, running, serving

import ortstate
from ortstate.errors import ServeError
from ortstate.serve import AsyncClient, Client
from ortstate.serve import journal as journal_module
from ortstate.serve.journal import Journal
from ortstate.serve.journal_format import LIVE, Record

STREAMS, KILLS = 64, 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigkill_at_random_moments_loses_no_acknowledged_step(tmp_path):
    """64 streams step without pause while the server is SIGKILLed at 20 random moments and started
    again on the same directory: every reply each stream got is a lone session's, in order (none
    lost, none made twice), and the server's step count of each is the client's."""
    port = _free_port()
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
    drivers = threading.Thread(target=lambda: result.append(asyncio.run(drive())), daemon=True)
    kills = threading.Thread(target=killer, daemon=True)
    kills.start()
    drivers.start()
    kills.join(600)
    assert result, "the clients did not finish"
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


def test_a_torn_tail_is_dropped_and_the_rest_recovered(tmp_path, caplog):
    rng = np.random.default_rng(42)
    pool, names = _pool(), ["a" * 22, "b" * 22]
    journal = Journal(tmp_path, pool)
    assert journal.recover() == []
    fed = _stepped(pool, journal, names, rng)
    journal.close()
    (segment,) = sorted((tmp_path / "journal").glob("seg-*.log"))
    whole = segment.stat().st_size
    extra = Record(LIVE, names[0], 3, [None, None]).encode()
    with open(segment, "ab") as f:
        f.write(extra[: len(extra) // 2])  # a write the kill cut short

    again = Journal(tmp_path, _pool())
    with caplog.at_level("WARNING", logger="ortstate.serve"):
        records = {r.stream: r for r in again.recover()}
    assert "dropped a torn record" in caplog.text
    assert not segment.exists() or segment.stat().st_size == whole  # compacted away, or cut back
    assert sorted(records) == names and all(r.steps == 2 for r in records.values())
    for name in names:
        lone = Lone()
        outs = [lone.step(f) for f in fed[name]]
        assert_same(records[name].outputs, outs[-1], name)
        want = [v.state for v in lone.request.query_state()]
        for got, value in zip(records[name].states, want):
            np.testing.assert_allclose(got, value, rtol=1e-6, atol=1e-6)


def test_a_log_that_cannot_be_written_acknowledges_nothing(tmp_path, monkeypatch):
    """A full disk during a step: the client is told the step was not made, and it was not: the next
    step (once the disk has room) gives what a lone session's next step gives."""
    rng = np.random.default_rng(43)
    lone = Lone()
    with running(state_dir=tmp_path, durable=True) as server:
        stream = Client(server.url).open()
        fed = feeds(rng)
        assert_same(stream.step(fed), lone.step(fed))
        real = journal_module._write_all

        def full(fd: int, data: bytes) -> None:
            real(fd, data[: len(data) // 3])  # part of it went out: it must be cut back
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(journal_module, "_write_all", full)
        with pytest.raises(ServeError, match=r"cannot write the log \(No space left on device\); the step was not"):
            stream.step(feeds(rng))
        monkeypatch.setattr(journal_module, "_write_all", real)
        fed = feeds(rng)
        last = stream.step(fed)
        assert_same(last, lone.step(fed), "after the failed step")
        assert Client(server.url).where(stream.id)["steps"] == 2
    records = {r.stream: r for r in Journal(tmp_path, _pool()).recover()}
    assert records[stream.id].steps == 2
    assert_same(records[stream.id].outputs, last, "the log's last reply")


def test_compaction_keeps_every_stream(tmp_path):
    """Segments of a few records: the log is compacted again and again in the background and what
    a server started again finds is each stream's last step."""
    rng = np.random.default_rng(44)
    pool, names = _pool(), [c * 22 for c in "cdefg"]
    journal = Journal(tmp_path, pool, segment_bytes=2048)
    journal.recover()
    fed = _stepped(pool, journal, names, rng)
    journal.close()
    files = sorted(p.name for p in (tmp_path / "journal").iterdir())
    assert len(files) <= 3, files  # old segments went once a checkpoint covered them
    records = {r.stream: r for r in Journal(tmp_path, _pool()).recover()}
    assert sorted(records) == names
    for name in names:
        lone = Lone()
        outs = [lone.step(f) for f in fed[name]]
        assert records[name].steps == 2
        assert_same(records[name].outputs, outs[-1], name)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--durable"], "--durable needs --state-dir"),
        (["--durable", "--ray", "--state-dir", "x"], "--durable needs --state-dir (its log is kept there) and is not"),
    ],
)
def test_durable_options_are_checked(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "ortstate", "serve", str(MODEL), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

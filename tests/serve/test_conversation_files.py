"""The LLM server's log of turns and its state directory, without a model: turns that end together
are written with one fsync; the log of a server that died becomes parked conversations at the next
start (a park it wrote published, one it took given back, one in memory made a ``.json`` of its
ids without a cache), its torn last record dropped, what it left half-written removed; a live
server's folder is left alone."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from ortstate.errors import OutputFileError, ServeError
from ortstate.serve import log as log_module
from ortstate.serve.log_format import CLOSED, LIVE, PARKED
from ortstate.serve.openai import conversation_recovery
from ortstate.serve.openai.conversation_files import ConversationFiles
from ortstate.serve.openai.conversation_log import TurnLog

TEXT = "<s>user: hi</s>assistant: hé"  # (not ASCII: the log keeps text as UTF-8)
NONE_BEFORE = {"before_text": None, "before_ids": []}  # (a first turn continues none)


def logged(folder: Path, name: str, records: list[tuple]) -> TurnLog:
    """A server ``name``'s log in ``folder`` holding ``records`` (``TurnLog.submit``'s arguments),
    each group of them (a list) written at once; left as a kill leaves it (unlocked, not removed)."""
    log = TurnLog(folder, name)
    log.start()

    async def write() -> None:
        for group in records:
            await asyncio.gather(*(log.submit(*record) for record in group))

    asyncio.run(write())
    log.close(remove=False)
    return log


def parked(folder: Path, cid: str) -> dict:
    return json.loads((folder / f"{cid}.json").read_text())


def test_turns_that_end_together_are_written_with_one_fsync(tmp_path: Path) -> None:
    ten = [(f"c{k}", LIVE, 1, f"{TEXT} {k}", [1, 2, k]) for k in range(10)]
    log = logged(
        tmp_path, "dead-1", [ten, [("c3", LIVE, 2, None, [1, 2, 3, 4]), ("c4", LIVE, 2, "t2", [7], (TEXT, [1]))]]
    )
    assert log.writes == 2
    files = ConversationFiles(tmp_path, "next-1", shared=False)  # recovers the dead server's log
    try:
        assert files.count() == 10
        assert parked(tmp_path, "c0") == {
            "tokens": [],
            "text": f"{TEXT} 0",
            "ids": [1, 2, 0],
            "turns": 1,
            **NONE_BEFORE,
        }
        assert parked(tmp_path, "c3") == {"tokens": [], "text": None, "ids": [1, 2, 3, 4], "turns": 2, **NONE_BEFORE}
        assert parked(tmp_path, "c4") == {
            "tokens": [],
            "text": "t2",
            "ids": [7],
            "turns": 2,
            "before_text": TEXT,
            "before_ids": [1],
        }
        assert not (tmp_path / "turns-dead-1").exists() and not list(tmp_path.glob("*.npz"))
    finally:
        files.release(remove_log=True)


def test_a_torn_last_record_is_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    logged(tmp_path, "dead-2", [[("a", LIVE, 1, TEXT, [5, 6])], [("a", LIVE, 2, TEXT + "!", [5, 6, 7])]])
    (segment,) = (tmp_path / "turns-dead-2").glob("seg-*.log")
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - 5])  # the last write, cut short by the kill
    with caplog.at_level("WARNING", logger="ortstate.serve"):
        ConversationFiles(tmp_path, "next-2", shared=False).release(remove_log=True)
    assert "dropped the last record (torn by the stop; never acknowledged)" in caplog.text
    assert parked(tmp_path, "a") == {"tokens": [], "text": TEXT, "ids": [5, 6], "turns": 1, **NONE_BEFORE}


def test_a_dead_servers_parks_and_claims_are_put_right(tmp_path: Path) -> None:
    """``published``: parked (written, logged) but not yet moved into the directory (``halfway``:
    its ``.npz`` moved, its ``.json`` not); ``later``: a
    park written, then a turn logged after it (the park failed); ``claimed``: taken by the dead
    server, nothing logged since; ``deleted``: closed; ``stale``: a turn logged after the park in
    the directory was taken, its files not yet removed. And what was left half-written goes (a
    cache whose ``.json`` was removed too)."""
    folder = tmp_path / "turns-dead-3"
    records = [
        [("published", LIVE, 1, "p", [1]), ("later", LIVE, 1, "l", [2]), ("deleted", LIVE, 1, "d", [3])],
        [("published", PARKED, 1), ("later", LIVE, 2, "l2", [2, 2]), ("deleted", CLOSED, 1)],
        [("stale", LIVE, 3, "s3", [4, 4, 4]), ("halfway", LIVE, 1, "h", [5])],
        [("halfway", PARKED, 1)],
    ]
    logged(tmp_path, "dead-3", records)
    for cid, turns in (("published", 1), ("later", 1), ("halfway", 1)):
        (folder / f"{cid}.npz").write_bytes(b"cache")
        (folder / f"{cid}.json").write_text(json.dumps({"tokens": [9], "text": cid, "ids": [9], "turns": turns}))
    os.replace(folder / "halfway.npz", tmp_path / "halfway.npz")  # stopped between the two moves of publish
    (tmp_path / "claimed.npz").write_bytes(b"cache")
    (tmp_path / "claimed.json.claimed-dead-3").write_text(json.dumps({"tokens": [8], "text": "c", "ids": [8]}))
    (tmp_path / "stale.npz").write_bytes(b"an older cache")
    (tmp_path / "stale.json.claimed-dead-3").write_text(
        json.dumps({"tokens": [7], "text": "s", "ids": [7], "turns": 2})
    )
    (folder / ".half.npz.0123abcd.tmp").write_bytes(b"half")  # a snapshot being written
    (folder / "half.npz").write_bytes(b"half")  # a park whose .json was never written
    (tmp_path / "removed.npz").write_bytes(b"cache")  # an eviction stopped after its .json went

    files = ConversationFiles(tmp_path, "next-3", shared=False)
    files.release(remove_log=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "claimed.json",
        "claimed.npz",
        "halfway.json",
        "halfway.npz",
        "later.json",
        "published.json",
        "published.npz",
        "stale.json",
    ]
    assert parked(tmp_path, "published")["tokens"] == [9]  # its cache kept
    assert parked(tmp_path, "halfway")["tokens"] == [9]
    assert parked(tmp_path, "later") == {"tokens": [], "text": "l2", "ids": [2, 2], "turns": 2, **NONE_BEFORE}
    assert parked(tmp_path, "claimed")["tokens"] == [8]
    assert parked(tmp_path, "stale") == {"tokens": [], "text": "s3", "ids": [4, 4, 4], "turns": 3, **NONE_BEFORE}


def test_a_live_servers_folder_is_left_alone(tmp_path: Path) -> None:
    log = TurnLog(tmp_path, "alive-4")
    log.start()
    try:
        files = ConversationFiles(tmp_path, "next-4", shared=True)
        files.release(remove_log=True)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["turns-alive-4"]
    finally:
        log.close(remove=True)
    assert list(tmp_path.iterdir()) == []


def test_a_turn_that_cannot_be_written_fails_its_waiters_only(tmp_path: Path, monkeypatch) -> None:
    log = TurnLog(tmp_path, "full-5")
    log.start()
    real = log_module._write_all

    def full(fd: int, data: bytes) -> None:
        real(fd, data[: len(data) // 2])  # part of it went out: it is cut back
        raise OSError(28, os.strerror(28))

    async def write() -> list:
        monkeypatch.setattr(log_module, "_write_all", full)
        first = await asyncio.gather(log.submit("a", LIVE, 1, "x", [1]), return_exceptions=True)
        monkeypatch.setattr(log_module, "_write_all", real)
        return [*first, await log.submit("a", LIVE, 1, "y", [2])]

    failed, written = asyncio.run(write())
    assert str(failed) == "the state directory cannot be written (No space left on device)" and written is None
    log.close(remove=False)
    ConversationFiles(tmp_path, "next-5", shared=False).release(remove_log=True)
    assert parked(tmp_path, "a") == {"tokens": [], "text": "y", "ids": [2], "turns": 1, **NONE_BEFORE}


def test_a_log_that_cannot_be_recovered_stays(tmp_path: Path, monkeypatch) -> None:
    """A full disk while a dead server's log is recovered: the start fails naming it, the log stays,
    and a start with room recovers every conversation."""
    logged(tmp_path, "dead-6", [[("a", LIVE, 1, "x", [1]), ("b", LIVE, 1, "y", [2])]])
    real = conversation_recovery.write_text

    def full(path: Path, text: str) -> None:
        if Path(path).name == "b.json":
            raise OutputFileError(f"{path}: cannot be written (No space left on device)")
        real(path, text)

    monkeypatch.setattr(conversation_recovery, "write_text", full)
    with pytest.raises(ServeError, match=r"1 conversations .* cannot be recovered .* turns-dead-6, which is kept: b"):
        ConversationFiles(tmp_path, "next-6", shared=False)
    assert (tmp_path / "turns-dead-6").is_dir()
    monkeypatch.setattr(conversation_recovery, "write_text", real)
    ConversationFiles(tmp_path, "next-6", shared=False).release(remove_log=True)
    assert parked(tmp_path, "b") == {"tokens": [], "text": "y", "ids": [2], "turns": 1, **NONE_BEFORE}
    assert parked(tmp_path, "a") == {"tokens": [], "text": "x", "ids": [1], "turns": 1, **NONE_BEFORE}

"""What a server keeps of its conversations is bounded: ``--max-parked-bytes`` keeps the state
directory (logs included) within its bound by removing the least recently used parked
conversations; ``--conversation-ttl`` removes idle ones, kept or parked; ``DELETE
/v1/conversations/{id}`` removes one at once. Each eviction and expiry is one log line. And a
conversation's files never take another's name (``X`` and ``X.partial``)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest
from conftest import MODEL as STREAM_MODEL
from conftest import openai_client as client
from conftest import serving
from oracle import REPO, assert_one_line_error, run_cli

from ortstate.generate import Generator
from ortstate.serve import LlmServeConfig, serve_llm_in_thread
from ortstate.serve.openai.conversation_files import ConversationFiles

LLM = REPO / "models" / "llm" / "llama"
HEADER = "X-Ortstate-Conversation"


@pytest.fixture(scope="module")
def llama() -> Generator:
    return Generator.from_dir(LLM)


def turn(url: str, cid: str, messages: str | list[dict[str, str]] = "Hello there", key: str = "none") -> Any:
    """A greedy chat turn of 6 tokens in conversation ``cid`` (``messages``: the history, or its one
    user message)."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return client(url, key).chat.completions.create(
        model="llama",
        messages=messages,
        max_tokens=6,
        temperature=0,
        extra_headers={HEADER: cid},
        extra_body={"return_token_ids": True},
    )


def delete(url: str, cid: str, token: str | None = "s3cret") -> tuple[int, Any]:
    """``DELETE /v1/conversations/{cid}``: its status and JSON body."""
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    request = urllib.request.Request(f"{url}/v1/conversations/{cid}", headers=headers, method="DELETE")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def held(folder: Path) -> int:
    """The bytes of every file under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def parked(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.json"))


def lines(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if f" {word}" in r.getMessage()]


def test_the_state_dir_stays_in_its_bound_by_evicting_the_least_recently_used(llama, tmp_path, caplog) -> None:
    bound = 60_000  # a few parked caches of the tiny llama (12 KB each), and its log
    names = [f"c{k:02d}" for k in range(12)]
    with caplog.at_level("WARNING", logger="ortstate.serve"):
        with serve_llm_in_thread(
            LlmServeConfig(LLM, 8, slots=4, state_dir=tmp_path, max_conversations=1, max_parked_bytes=bound)
        ) as s:
            for cid in names:  # each parks the one before (one is kept in memory)
                turn(s.url, cid, f"Hello {cid}")
                assert held(tmp_path) <= bound, cid
            kept = parked(tmp_path)
            evicted = [f"ortstate serve: conversation {cid} evicted" for cid in names[: len(names) - 1 - len(kept)]]
            assert kept == names[len(evicted) : -1] and len(evicted) >= 3 and len(kept) >= 2
            assert [m.split(",")[0] for m in lines(caplog, "evicted")] == evicted
            assert all(f"over --max-parked-bytes {bound}" in m for m in lines(caplog, "evicted"))
            again = turn(s.url, names[0], f"Hello {names[0]}")  # evicted: it starts over
            assert again.usage.prompt_tokens_details.cached_tokens == 0
            assert again.choices[0].token_ids == llama.generate(again.choices[0].prompt_token_ids, 6)


@pytest.mark.parametrize("on_disk", [True, False], ids=["state-dir", "memory"])
def test_idle_conversations_expire_kept_or_parked(llama, tmp_path, caplog, on_disk: bool) -> None:
    state = {"state_dir": tmp_path, "max_conversations": 1} if on_disk else {"max_conversations": 2}
    with caplog.at_level("WARNING", logger="ortstate.serve"):
        with serve_llm_in_thread(LlmServeConfig(LLM, 8, slots=4, conversation_ttl=0.3, **state)) as s:
            first = turn(s.url, "a")
            turn(s.url, "b")  # with a state directory "a" is parked for it, else both are kept
            deadline = time.monotonic() + 30
            while len(lines(caplog, "expired")) < 2:
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.02)
            assert sorted(m.split()[3] for m in lines(caplog, "expired")) == ["a", "b"]
            assert all("--conversation-ttl 0.3" in m for m in lines(caplog, "expired"))
            assert parked(tmp_path) == [] and s.service.batcher.pool.streams == []
            again = turn(s.url, "a")  # it starts over
            assert again.usage.prompt_tokens_details.cached_tokens == 0
            assert again.choices[0].token_ids == first.choices[0].token_ids


def test_delete_removes_a_conversation_and_its_files(tmp_path) -> None:
    with serve_llm_in_thread(
        LlmServeConfig(LLM, 8, slots=4, state_dir=tmp_path, max_conversations=1, token="s3cret")
    ) as s:
        turn(s.url, "a", key="s3cret")
        turn(s.url, "b", key="s3cret")  # "a" is parked for it
        assert parked(tmp_path) == ["a"]
        assert delete(s.url, "a", token=None)[0] == 401
        for cid in ("a", "b"):  # parked, then kept in memory
            assert delete(s.url, cid) == (200, {"id": cid, "object": "conversation.deleted", "deleted": True})
        assert parked(tmp_path) == [] and s.service.batcher.pool.streams == []
        assert delete(s.url, "b") == (
            404,
            {
                "error": {
                    "message": "no conversation 'b'",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "conversation_not_found",
                }
            },
        )
        asyncio.run(s.service.conversations.take("c"))  # as a request running on it would
        status, body = delete(s.url, "c")
        assert (status, body["error"]["code"]) == (409, "busy")
        s.service.conversations.done("c")
        assert delete(s.url, "c")[0] == 200
        assert turn(s.url, "a", key="s3cret").usage.prompt_tokens_details.cached_tokens == 0  # it starts over


@pytest.mark.parametrize(
    ("one", "other", "files"),
    [
        ("X.partial", "X", ["x.partial^1.json", "x.partial^1.npz", "x^1.json", "x^1.npz"]),
        ("chat", "Chat", ["chat.json", "chat.npz", "chat^1.json", "chat^1.npz"]),
    ],
    ids=["temporary-file", "case"],
)
def test_a_conversation_named_like_anothers_file_keeps_its_cache(llama, tmp_path, one, other, files) -> None:
    """Parking ``X`` wrote ``X.partial.npz``, which is ``X.partial``'s own file: ``X.partial`` lost
    its cache. Files being written now go to the server's own folder. And ``Chat``'s files were
    ``chat``'s on a case-insensitive filesystem: an id's capitals are named apart
    (:mod:`ortstate.serve.openai.conversation_names`), no two ids' files the same name in any case."""
    with serve_llm_in_thread(LlmServeConfig(LLM, 8, slots=4, state_dir=tmp_path, max_conversations=1)) as s:
        first = turn(s.url, one)
        turn(s.url, other)  # parks the one
        history = [
            {"role": "user", "content": "Hello there"},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "And then?"},
        ]
        second = turn(s.url, one, history)  # parks the other, restores the one
        assert second.usage.prompt_tokens_details.cached_tokens > 0
        assert second.choices[0].token_ids == llama.generate(second.choices[0].prompt_token_ids, 6)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == files and len({name.casefold() for name in names}) == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-parked-bytes", "10G"], "--max-parked-bytes needs --state-dir: it bounds what is kept there"),
        (
            ["--state-dir", "{tmp}", "--max-parked-bytes", "ten"],
            "--max-parked-bytes must be a positive number of bytes (e.g. 2000000000, 512M or 10G), got 'ten'",
        ),
        (["--conversation-ttl", "0"], "--conversation-ttl must be positive, got 0.0"),
    ],
    ids=["bound-without-dir", "bound-not-bytes", "ttl-not-positive"],
)
def test_command_line_refusals(capsys, tmp_path, argv: list[str], message: str) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, out, err = run_cli(capsys, "serve", LLM, "--port", "0", *argv)
    assert (code, out) == (2, "")
    assert_one_line_error(err, message)
    code, out, err = run_cli(capsys, "serve", STREAM_MODEL, "--port", "0", "--conversation-ttl", "5")
    assert (code, out) == (2, "")
    assert_one_line_error(err, "--max-parked-bytes and --conversation-ttl apply to an LLM folder's conversations")


def test_a_deleted_conversation_stays_deleted_after_a_sigkill(tmp_path) -> None:
    for k in range(2):
        with serving("--state-dir", str(tmp_path), "--token", "s3cret", model=LLM) as (proc, url):
            if k == 0:
                turn(url, "gone", key="s3cret")
                turn(url, "kept", key="s3cret")
                assert delete(url, "gone")[0] == 200
            else:  # the log said "kept" was in memory: it is parked now, "gone" is not
                assert parked(tmp_path) == ["kept"] and delete(url, "gone")[0] == 404
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)


def test_a_conversation_that_cannot_make_room_is_refused_not_another_forgotten(tmp_path, monkeypatch) -> None:
    """A full disk when a new conversation needs the room of one in memory: the new one is answered
    503 naming the header, the one that could not be parked stays as it was (its next turn continues
    its cache), and once there is room the new one is taken."""
    real = ConversationFiles.write_meta

    def full(*args: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with serve_llm_in_thread(LlmServeConfig(LLM, 8, slots=4, state_dir=tmp_path, max_conversations=1)) as s:
        first = turn(s.url, "a")
        monkeypatch.setattr(ConversationFiles, "write_meta", full)
        with pytest.raises(openai.InternalServerError) as info:
            turn(s.url, "b")
        assert info.value.status_code == 503
        assert (info.value.body["param"], info.value.body["code"]) == ("x-ortstate-conversation", "state_not_written")
        assert "state directory cannot be written" in info.value.body["message"] and str(tmp_path) not in str(
            info.value.body
        )
        history = [
            {"role": "user", "content": "Hello there"},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "And then?"},
        ]
        assert turn(s.url, "a", history).usage.prompt_tokens_details.cached_tokens > 0  # not forgotten
        monkeypatch.setattr(ConversationFiles, "write_meta", real)
        turn(s.url, "b")
        assert parked(tmp_path) == ["a"]

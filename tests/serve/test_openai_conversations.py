"""Conversations kept between requests (``X-Ortstate-Conversation``): a turn prefills only what the
cache lacks and answers what a lone Generator gives for its whole prompt; a turn that does not
continue the cache is prefilled whole; conversations parked at SIGTERM continue after a restart
exactly as without one; room is made by parking or forgetting the least recently used."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from conftest import openai_client as client
from conftest import serving
from oracle import REPO

from ortstate.generate import Generator
from ortstate.serve import LlmServeConfig, serve_llm_in_thread
from ortstate.serve.openai import conversations

LLM = REPO / "models" / "llm"
HEADER = "X-Ortstate-Conversation"
SYNTAX = "x-ortstate-conversation: 1 to 128 of A-Z a-z 0-9 . _ ~ -, not . or .."  # the 400 for another id
TURNS = ["Hello there", "And then?", "Why so?"]


@pytest.fixture(scope="module")
def llama() -> Generator:
    return Generator.from_dir(LLM / "llama")


def turn(api: openai.OpenAI, messages: list[dict[str, str]], cid: str | None = "c1", **more: Any) -> Any:
    """One chat turn, greedy, 6 tokens, with its token ids; ``messages`` gets the reply appended."""
    headers = {} if cid is None else {HEADER: cid}
    reply = api.chat.completions.create(
        model="llama",
        messages=messages,
        max_tokens=6,
        temperature=0,
        extra_headers=headers,
        extra_body={"return_token_ids": True},
        **more,
    )
    messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    return reply


def converse(url: str, turns: list[str], cid: str | None = "c1") -> list[Any]:
    api, messages, replies = client(url), [], []
    for text in turns:
        messages.append({"role": "user", "content": text})
        replies.append(turn(api, messages, cid))
    return replies


def check_turns(gen: Generator, replies: list[Any], cached_first: int = 0) -> None:
    """Each turn's prompt goes on from the last turn's ids (its eos left out, the template writes
    its own); all but the last of those came from the cache; its tokens are a lone Generator's
    for the whole prompt."""
    previous: list[int] | None = None
    held = 0  # what the cache holds: the last prompt and reply, the reply's last token not yet fed
    for k, reply in enumerate(replies):
        choice, cached = reply.choices[0], reply.usage.prompt_tokens_details.cached_tokens
        prompt = choice.prompt_token_ids
        assert choice.token_ids == gen.generate(prompt, 6) and reply.usage.prompt_tokens == len(prompt)
        if previous is None:
            assert cached == cached_first, k
        else:
            assert prompt[: len(previous)] == previous and cached == held, k
        ended = choice.token_ids[-1] in gen.config.eos_token_ids
        previous = prompt + (choice.token_ids[:-1] if ended else choice.token_ids)
        held = len(prompt) + len(choice.token_ids) - 1


def test_each_turn_prefills_only_what_the_cache_lacks(llama: Generator) -> None:
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 8, slots=4)) as running:
        replies = converse(running.url, TURNS)
        check_turns(llama, replies)
        assert replies[1].usage.prompt_tokens_details.cached_tokens > 10

        # Another conversation, streamed: its cache is its own.
        api, messages = client(running.url), [{"role": "user", "content": TURNS[0]}]
        whole = turn(api, list(messages), cid="c2")
        chunks = list(
            api.chat.completions.create(
                model="llama",
                messages=[*messages, {"role": "assistant", "content": whole.choices[0].message.content}]
                + [{"role": "user", "content": TURNS[1]}],
                max_tokens=6,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers={HEADER: "c2"},
            )
        )
        assert (
            "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            == replies[1].choices[0].message.content
        )
        assert (
            chunks[-1].usage.prompt_tokens_details.cached_tokens == replies[1].usage.prompt_tokens_details.cached_tokens
        )

        # An edited history does not continue the cache: prefilled whole, the answer a fresh one's.
        edited = [{"role": "user", "content": "Something else"}, {"role": "assistant", "content": "x"}]
        edited.append({"role": "user", "content": TURNS[1]})
        reply = turn(api, edited)
        fresh = llama.tokenizer.encode(llama.tokenizer.apply_chat_template(edited[:-1]), add_special_tokens=False)
        assert reply.usage.prompt_tokens_details.cached_tokens == 0
        assert reply.choices[0].prompt_token_ids == fresh and reply.choices[0].token_ids == llama.generate(fresh, 6)
        # Without the header nothing is kept or reused.
        assert (
            turn(api, [{"role": "user", "content": TURNS[0]}], cid=None).usage.prompt_tokens_details.cached_tokens == 0
        )


def test_a_reply_ended_by_eos_is_continued_with_the_templates_eos(llama: Generator) -> None:
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 8, slots=4)) as running:
        replies = converse(running.url, ["model batch", TURNS[1]])  # llama's reply ends with eos
    first = replies[0].choices[0]
    assert first.finish_reason == "stop" and first.token_ids[-1] in llama.config.eos_token_ids
    check_turns(llama, replies)
    eos = llama.tokenizer.token_id(llama.tokenizer.special_tokens["eos_token"])
    second = replies[1].choices[0].prompt_token_ids
    assert second[len(first.prompt_token_ids) + len(first.token_ids) - 1] == eos  # the template's own, fed now


def test_completions_continue_token_ids_and_text(llama: Generator) -> None:
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 8, slots=4)) as running:
        api = client(running.url)
        extra = {"return_token_ids": True}
        first = api.completions.create(
            model="llama",
            prompt=[18, 152, 24],
            max_tokens=5,
            temperature=0,
            extra_headers={HEADER: "ids"},
            extra_body=extra,
        )
        ids = [18, 152, 24, *first.choices[0].token_ids, 30, 31]
        second = api.completions.create(
            model="llama", prompt=ids, max_tokens=5, temperature=0, extra_headers={HEADER: "ids"}, extra_body=extra
        )
        assert second.usage.prompt_tokens_details.cached_tokens == 3 + 5 - 1
        assert second.choices[0].token_ids == llama.generate(ids, 5)

        text = "Stateful models"
        first = api.completions.create(
            model="llama", prompt=text, max_tokens=5, temperature=0, extra_headers={HEADER: "text"}, extra_body=extra
        )
        more = text + first.choices[0].text + " run."
        second = api.completions.create(
            model="llama", prompt=more, max_tokens=5, temperature=0, extra_headers={HEADER: "text"}, extra_body=extra
        )
        prompt = second.choices[0].prompt_token_ids
        assert (
            prompt[: len(first.choices[0].prompt_token_ids) + 5]
            == first.choices[0].prompt_token_ids + first.choices[0].token_ids
        )
        assert second.usage.prompt_tokens_details.cached_tokens == len(first.choices[0].prompt_token_ids) + 5 - 1
        assert second.choices[0].token_ids == llama.generate(prompt, 5)


def test_a_conversation_continues_across_a_sigterm_restart(llama: Generator, tmp_path: Path) -> None:
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 8, slots=4)) as running:
        unbroken = converse(running.url, TURNS)
    api, messages, replies = None, [], []
    for k, text in enumerate(TURNS):
        with serving("--state-dir", str(tmp_path), "--no-access-log", model=LLM / "llama") as (proc, url):
            api = client(url)
            messages.append({"role": "user", "content": text})
            replies.append(turn(api, messages))
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and err == "", err
        assert out.splitlines()[-1] == f"ortstate serve: stopped; 1 conversations parked in {tmp_path}", k
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c1.json", "c1.npz"]
    check_turns(llama, replies)
    assert [r.choices[0].token_ids for r in replies] == [r.choices[0].token_ids for r in unbroken]
    assert [r.usage.model_dump() for r in replies] == [r.usage.model_dump() for r in unbroken]


def test_room_is_made_by_parking_or_forgetting_the_least_recently_used(
    llama: Generator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for state_dir in (tmp_path, None):
        with serve_llm_in_thread(
            LlmServeConfig(LLM / "llama", 8, slots=4, state_dir=state_dir, max_conversations=2)
        ) as running:
            api = client(running.url)
            histories = {cid: [{"role": "user", "content": f"{TURNS[0]} {cid}"}] for cid in ("a", "b", "c")}
            caplog.clear()
            for cid, messages in histories.items():  # "c" makes room: "a" goes
                turn(api, messages, cid)
            if state_dir is None:  # an eviction is one log line (parked: parking it is no eviction)
                assert [r.getMessage() for r in caplog.records if "evicted" in r.getMessage()] == [
                    "ortstate serve: conversation a evicted, the least recently used: --max-conversations 2 are kept "
                    "and there is no --state-dir to park it in"
                ]
            if state_dir is not None:
                assert sorted(p.name for p in tmp_path.glob("a*")) == ["a.json", "a.npz"]
                assert not list(tmp_path.glob("[bc]*"))
            messages = histories["a"] + [{"role": "user", "content": TURNS[1]}]
            reply = turn(api, messages, "a")
            cached = reply.usage.prompt_tokens_details.cached_tokens
            assert (cached > 0) == (state_dir is not None)  # parked comes back; forgotten starts over
            assert reply.choices[0].token_ids == llama.generate(reply.choices[0].prompt_token_ids, 6)
        if state_dir is not None:  # "b" made room for "a" again; at the stop, the two kept were parked
            assert sorted(p.stem for p in tmp_path.glob("*.npz")) == ["a", "b", "c"]


def test_one_request_at_a_time_per_conversation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conversations, "WAIT_SECONDS", 0.2)
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 8, slots=4)) as running:
        api = client(running.url)
        asyncio.run(running.service.conversations.take("busy"))  # as a request running on it would
        with pytest.raises(openai.ConflictError) as info:
            turn(api, [{"role": "user", "content": "hi"}], "busy")
        assert info.value.response.json() == {
            "error": {
                "message": "conversation busy has a request running",
                "type": "invalid_request_error",
                "param": "x-ortstate-conversation",
                "code": "busy",
            }
        }
        running.service.conversations.done("busy")
        assert turn(api, [{"role": "user", "content": "hi"}], "busy").choices[0].finish_reason in ("length", "stop")
        for refused in ("no spaces", "..", ".", "", "a" * 129, "a/b", "%2F"):
            with pytest.raises(openai.BadRequestError) as info:
                turn(api, [{"role": "user", "content": "hi"}], refused)
            assert info.value.response.json()["error"] == {
                "message": f"{SYNTAX}, got {refused[:40]!r}",
                "type": "invalid_request_error",
                "param": "x-ortstate-conversation",
                "code": None,
            }
        assert running.service.in_flight == 0


def test_idle_conversations_are_parked_and_come_back(llama: Generator, tmp_path: Path) -> None:
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 8, slots=4, state_dir=tmp_path, idle_park=0.2)) as running:
        api, messages = client(running.url), [{"role": "user", "content": TURNS[0]}]
        first = turn(api, messages)
        deadline = time.monotonic() + 10
        while not (tmp_path / "c1.npz").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sorted(p.name for p in tmp_path.glob("c1*")) == ["c1.json", "c1.npz"]
        assert running.service.batcher.pool.streams == []  # its row given back
        messages.append({"role": "user", "content": TURNS[1]})
        second = turn(api, messages)
    check_turns(llama, [first, second])

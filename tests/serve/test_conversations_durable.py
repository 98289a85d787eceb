"""A conversation's turns survive a hard stop (``--state-dir``): every turn's token ids are logged
before its reply ends, so a server SIGKILLed between turns (or in the middle of a reply) and
started again on the directory answers every next turn with the tokens a server never killed gives,
greedy or seeded; its lost cache is prefilled again from those ids. A turn whose reply did not reach
the client, sent again, is answered as it was, logged or not. A conversation deleted before
the kill stays deleted."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path
from typing import Any

import openai
import pytest
from conftest import openai_client as client
from conftest import serving
from oracle import REPO

from ortstate.serve import LlmServeConfig, serve_llm_in_thread
from ortstate.serve import log as log_module

LLM = REPO / "models" / "llm" / "llama"
HEADER = "X-Ortstate-Conversation"
TURNS = ["Hello there", "And then?", "Interrupted here, why so?", "Tell me more"]
MARK = "Interrupted here"  # the turn the server is killed in the middle of carries it
CONVERSATIONS = {  # id: sampling (seeded ones take a seed per turn)
    "greedy-a": {"temperature": 0},
    "greedy-b": {"temperature": 0},
    "seeded-a": {"temperature": 1.0, "seed": 11},
    "seeded-b": {"temperature": 0.8, "top_p": 0.9, "seed": 5},
}
# ``ortstate serve`` whose log write holding MARK hangs before (or after) it is made: killed then,
# the turn (its reply streamed to the end, its [DONE] not sent) is not (or is) on disk, as a kill in
# the middle of a reply leaves it (or one after the turn was logged, before its reply ended).
HOLD_THE_MARKED_WRITE = """
import sys, threading
from ortstate.serve import log as log_module
real = log_module._write_all
def write_all(fd, data):
    if {mark!r} in data:
        {first}
        threading.Event().wait()
    real(fd, data)
log_module._write_all = write_all
from ortstate.cli import main
sys.exit(main(sys.argv[1:]))
"""
HOLDS = {  # the conversation killed in the middle of its marked turn: the write held before it, or after
    "greedy-b": HOLD_THE_MARKED_WRITE.format(mark=MARK.encode(), first="pass"),
    "greedy-a": HOLD_THE_MARKED_WRITE.format(mark=MARK.encode(), first="real(fd, data)"),
}


def ask(api: openai.OpenAI, cid: str, messages: list[dict[str, str]], k: int, **more: Any) -> Any:
    sampling = dict(CONVERSATIONS[cid])
    if "seed" in sampling:
        sampling["seed"] += k
    return api.chat.completions.create(
        model="llama",
        messages=messages,
        max_tokens=8,
        extra_headers={HEADER: cid},
        extra_body={"return_token_ids": True},
        **sampling,
        **more,
    )


def turn(api: openai.OpenAI, cid: str, history: list[dict[str, str]], k: int) -> tuple[list[int], list[int], int]:
    """Turn ``k`` of ``cid``: (its prompt's ids, its reply's, the prompt tokens its cache held);
    ``history`` gets the turn and its reply."""
    history.append({"role": "user", "content": TURNS[k]})
    reply = ask(api, cid, history, k)
    choice = reply.choices[0]
    history.append({"role": "assistant", "content": choice.message.content})
    return choice.prompt_token_ids, choice.token_ids, reply.usage.prompt_tokens_details.cached_tokens


def killed(proc: Any) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def test_a_sigkill_between_turns_or_mid_reply_changes_no_answer(tmp_path: Path) -> None:
    histories: dict[str, list[dict[str, str]]] = {cid: [] for cid in CONVERSATIONS}
    got: dict[str, list[tuple[list[int], list[int], int]]] = {cid: [] for cid in CONVERSATIONS}
    state = ("--state-dir", str(tmp_path))
    for k in range(len(TURNS)):  # a server per round of turns, each SIGKILLed after it
        with serving(*state, model=LLM) as (proc, url):
            for cid in CONVERSATIONS:
                got[cid].append(turn(client(url), cid, histories[cid], k))
            killed(proc)
        for cid, hold in HOLDS.items() if k == 1 else ():  # the next turn, its server killed before the reply ends
            with serving(*state, model=LLM, prelude=hold) as (proc, url):
                messages = [*histories[cid], {"role": "user", "content": TURNS[2]}]
                chunks = ask(client(url), cid, messages, 2, stream=True)
                for chunk in chunks:  # every token streamed, then the log write that ends the reply hangs
                    if chunk.choices and chunk.choices[0].finish_reason is not None:
                        break
                killed(proc)  # the client sends the turn again to the next server
    assert not list(tmp_path.glob("*.claimed-*")) and not list(tmp_path.glob("*.tmp"))

    with serve_llm_in_thread(LlmServeConfig(LLM, 8, slots=4)) as unbroken:  # never killed: the cache kept throughout
        for cid in CONVERSATIONS:
            history: list[dict[str, str]] = []
            for k in range(len(TURNS)):
                prompt, tokens, cached = turn(client(unbroken.url), cid, history, k)
                assert (got[cid][k][0], got[cid][k][1]) == (prompt, tokens), (cid, k)
                if k:  # the killed server's cache was gone: the same ids, prefilled whole
                    assert cached > 0 and got[cid][k][2] == 0, (cid, k)


def test_a_turn_that_cannot_be_logged_is_refused_and_undone(tmp_path: Path, monkeypatch) -> None:
    """A full disk when a turn ends: the reply is a 500 (streamed: an error event instead of
    ``[DONE]``) and the conversation is as before the turn; sent again once there is room, the turn
    gets a server never troubled's tokens."""
    real = log_module._write_all

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with serve_llm_in_thread(LlmServeConfig(LLM, 8, slots=4, state_dir=tmp_path)) as server:
        api, history = client(server.url), []
        turn(api, "greedy-a", history, 0)
        messages = [*history, {"role": "user", "content": TURNS[1]}]
        monkeypatch.setattr(log_module, "_write_all", full)
        with pytest.raises(openai.InternalServerError) as info:
            ask(api, "greedy-a", messages, 1)
        assert info.value.body == {
            "message": "conversation greedy-a: the state directory cannot be written (No space left on device)",
            "type": "server_error",
            "param": None,
            "code": "state_not_written",
        }
        with pytest.raises(openai.APIError, match="cannot be written"):
            list(ask(api, "greedy-a", messages, 1, stream=True))
        monkeypatch.setattr(log_module, "_write_all", real)
        again = turn(api, "greedy-a", history, 1)
    with serve_llm_in_thread(LlmServeConfig(LLM, 8, slots=4)) as unbroken:
        api, history = client(unbroken.url), []
        turn(api, "greedy-a", history, 0)
        assert turn(api, "greedy-a", history, 1)[:2] == again[:2]

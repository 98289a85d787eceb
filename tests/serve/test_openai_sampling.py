"""``ortstate serve``'s OpenAI API applies vLLM's sampling fields, each with its effect and the
tokens a lone Generator gives for the same options (top_k=1 and a vanishing temperature give
greedy's text for every seed; penalties change greedy's; logit_bias +100 forces a token; ignore_eos
and min_tokens run past eos; stop_token_ids stop); ``n`` choices come in one answer or as chunks
carrying their index, usage counting all of them; every field it does not apply is a 400 naming it,
but those that cannot change the output."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import openai_client
from oracle import REPO

from ortstate.generate import Generator
from ortstate.serve import LlmServeConfig, serve_llm_in_thread

LLM = REPO / "models" / "llm"
PROMPT = [18, 152, 24, 240, 209]  # llama's reference prompt: greedy repeats token 77
EOS = 2


@pytest.fixture(scope="module")
def llama() -> Iterator[tuple[Generator, str]]:
    gen = Generator.from_dir(LLM / "llama")
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 16, slots=8)) as running:
        yield gen, running.url


def post(url: str, body: dict[str, Any], path: str = "/v1/completions", headers: dict | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if not text.startswith("data:") else text
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def tokens(url: str, **fields: Any) -> tuple[list[int], str]:
    """A completion of PROMPT's token ids, 8 tokens at most: (its token ids, its finish reason)."""
    body = {"model": "llama", "prompt": PROMPT, "max_tokens": 8, "return_token_ids": True, **fields}
    status, got = post(url, body)
    assert status == 200, got
    return got["choices"][0]["token_ids"], got["choices"][0]["finish_reason"]


GREEDY = {"temperature": 0}
# (the request's fields, the Generator's keywords for the same search)
CASES = {
    "top_k=1 is greedy": ({"top_k": 1, "seed": 3}, {}),
    "temperature 1e-300 is greedy": ({"temperature": 1e-300, "seed": 4}, {}),
    "temperature 1e-40 is greedy": ({"temperature": 1e-40, "seed": 5, "top_p": 0.5}, {}),
    "repetition_penalty": ({**GREEDY, "repetition_penalty": 1.8}, {"repetition_penalty": 1.8}),
    "presence_penalty": ({**GREEDY, "presence_penalty": 1.5}, {"presence_penalty": 1.5}),
    "frequency_penalty": ({**GREEDY, "frequency_penalty": 0.8}, {"frequency_penalty": 0.8}),
    "logit_bias forces": ({**GREEDY, "logit_bias": {"9": 100}}, {"logit_bias": {9: 100}}),
    "logit_bias bans": ({**GREEDY, "logit_bias": {"77": -100}}, {"logit_bias": {77: -100}}),
    "stop_token_ids": ({**GREEDY, "stop_token_ids": [77]}, {"stop_token_ids": [77]}),
    "eos forced": ({**GREEDY, "logit_bias": {"2": 100}}, {"logit_bias": {2: 100}}),
    "ignore_eos": ({**GREEDY, "logit_bias": {"2": 100}, "ignore_eos": True}, {"logit_bias": {2: 100}, "stop": False}),
    "min_tokens": ({**GREEDY, "logit_bias": {"2": 100}, "min_tokens": 3}, {"logit_bias": {2: 100}, "min_tokens": 3}),
    "min_p": (
        {"temperature": 1.5, "min_p": 0.3, "seed": 6},
        {"do_sample": True, "temperature": 1.5, "min_p": 0.3, "seed": 6, "top_k": 0},
    ),
    "top_k": (
        {"temperature": 1.2, "top_k": 3, "seed": 8},
        {"do_sample": True, "temperature": 1.2, "top_k": 3, "seed": 8},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_field_has_its_effect_as_in_the_generator(case: str, llama: tuple[Generator, str]) -> None:
    gen, url = llama
    fields, search = CASES[case][0], dict(CASES[case][1])
    stop_at_eos = search.pop("stop", True)
    want = gen.generate(PROMPT, 8, stop_at_eos=stop_at_eos, **search)
    got, finish = tokens(url, **fields)
    assert got == want
    greedy = gen.generate(PROMPT, 8)
    assert (got == greedy) == case.endswith("is greedy")  # each field changes greedy's text, or is greedy's
    ended = got[-1] == EOS and stop_at_eos or got[-1] in fields.get("stop_token_ids", [])
    assert finish == ("stop" if ended else "length")
    if case == "logit_bias forces":
        assert got == [9] * 8
    if case == "ignore_eos":
        assert got == [EOS] * 8  # eos, and on past it
    if case == "min_tokens":
        assert len(got) == 4 and EOS not in got[:3] and got[3] == EOS


def test_n_choices_in_one_answer_and_streamed(llama: tuple[Generator, str]) -> None:
    gen, url = llama
    want = [gen.generate(PROMPT, 8, do_sample=True, top_k=0, seed=11 + i) for i in range(3)]
    status, got = post(url, {"model": "llama", "prompt": PROMPT, "max_tokens": 8, "n": 3, "seed": 11,
                             "return_token_ids": True})  # fmt: skip
    assert status == 200, got
    assert [(c["index"], c["token_ids"]) for c in got["choices"]] == list(enumerate(want))
    assert got["usage"]["completion_tokens"] == sum(map(len, want)) and got["usage"]["prompt_tokens"] == 5
    tok = gen.tokenizer
    messages = [{"role": "user", "content": "hello"}]
    api = openai_client(url)
    whole = api.chat.completions.create(model="llama", messages=messages, max_tokens=6, n=2, seed=3)
    chunks = list(
        api.chat.completions.create(
            model="llama", messages=messages, max_tokens=6, n=2, seed=3, stream=True,
            stream_options={"include_usage": True}, extra_body={"return_token_ids": True},
        )
    )  # fmt: skip
    roles, pieces, finishes, usage = chunks[:2], chunks[2:-3], chunks[-3:-1], chunks[-1]
    assert [(c.choices[0].index, c.choices[0].delta.role) for c in roles] == [(0, "assistant"), (1, "assistant")]
    ids: dict[int, list[int]] = {0: [], 1: []}
    for c in pieces:
        ids[c.choices[0].index] += c.choices[0].token_ids
    finish = {c.choices[0].index: c.choices[0].finish_reason for c in finishes}
    assert ids[0] != ids[1]
    for choice in whole.choices:  # the same seed: the same choices, whole or streamed
        assert choice.message.content == tok.decode(ids[choice.index]) and choice.finish_reason == finish[choice.index]
    assert usage.usage.completion_tokens == whole.usage.completion_tokens == len(ids[0]) + len(ids[1])


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"foo": 1}, "foo", "field(s) not supported: 'foo' (this server refuses what it does not apply)"),
        ({"use_beam_search": True, "bad_words": ["x"]}, "use_beam_search",
         "field(s) not supported: 'use_beam_search', 'bad_words' (this server refuses what it does not apply)"),
        ({"guided_json": {"type": "object"}}, "guided_json",
         "field(s) not supported: 'guided_json' (this server refuses what it does not apply)"),
        ({"best_of": 2}, "best_of", "best_of is not supported (n choices are n samples)"),
        ({"top_k": -2}, "top_k", "top_k must be an integer >= 1, or 0 or -1 to keep every token, got -2"),
        ({"min_p": 2}, "min_p", "min_p must be in [0, 1], got 2"),
        ({"presence_penalty": 3}, "presence_penalty", "presence_penalty must be in [-2, 2], got 3"),
        ({"frequency_penalty": -2.5}, "frequency_penalty", "frequency_penalty must be in [-2, 2], got -2.5"),
        ({"repetition_penalty": 0}, "repetition_penalty",
         "repetition_penalty must be a number > 0 (1 = no penalty), got 0"),
        ({"logit_bias": {"abc": 1}}, "logit_bias", "logit_bias keys must be token ids (integers >= 0), got 'abc'"),
        ({"logit_bias": {"999": 1}}, "logit_bias", "logit_bias: token id(s) 999 outside the vocabulary (0..255)"),
        ({"logit_bias": [1]}, "logit_bias", "logit_bias must map token ids to numbers, got list"),
        ({"min_tokens": 9}, "min_tokens", "min_tokens 9 is more than max_new_tokens 8"),
        ({"stop_token_ids": [-1]}, "stop_token_ids", "stop_token_ids must be non-negative integers, got -1"),
        ({"ignore_eos": "yes"}, "ignore_eos", "ignore_eos must be true or false, got 'yes'"),
        ({"n": 0}, "n", "n must be an integer >= 1, got 0"),
        ({"n": 2, "temperature": 0}, "n", "n must be 1 when decoding greedily, got 2: n > 1 choices need sampling"),
        ({"n": 9}, "n", "n must be at most the pool's 8 slots, got 9"),
    ],
)  # fmt: skip
def test_what_it_does_not_apply_is_refused_naming_the_field(
    fields: dict, param: str, message: str, llama: tuple[Generator, str]
) -> None:
    _, url = llama
    status, got = post(url, {"model": "llama", "prompt": PROMPT, "max_tokens": 8, **fields})
    assert (status, got) == (400, {"error": {"message": message, "type": "invalid_request_error", "param": param,
                                             "code": None}})  # fmt: skip


def test_n_in_a_conversation_is_refused(llama: tuple[Generator, str]) -> None:
    _, url = llama
    body = {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "n": 2}
    status, got = post(url, body, "/v1/chat/completions", {"x-ortstate-conversation": "c1"})
    assert status == 400 and got["error"]["param"] == "n"
    assert got["error"]["message"] == "n must be 1 in a conversation (x-ortstate-conversation): it continues one answer"


def test_fields_that_cannot_change_the_output_are_taken(llama: tuple[Generator, str]) -> None:
    _, url = llama
    quiet = {"user": "u1", "metadata": {"k": "v"}, "store": False, "service_tier": "auto", "safety_identifier": "s",
             "prompt_cache_key": "p", "parallel_tool_calls": True, "tools": None}  # fmt: skip
    assert tokens(url, **GREEDY, **quiet) == tokens(url, **GREEDY)

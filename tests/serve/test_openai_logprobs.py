"""``logprobs`` through the official ``openai`` client: each generated token's logprob and its top
tokens are a numpy log-softmax of a lone Generator's logits for the same prompt (within 1e-4),
most likely first, streamed or whole, in OpenAI's shapes; bad values get OpenAI's 400 body."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest
from conftest import openai_client
from oracle import REPO

from ortstate.generate import Generator, SearchOptions
from ortstate.generate.request import Request
from ortstate.generate.stopping import StopCriteria
from ortstate.serve import LlmServeConfig, serve_llm_in_thread

FOLDER = REPO / "models" / "llm" / "llama"
PROMPT = [1, 5, 7, 9, 11, 13]
MESSAGES = [{"role": "user", "content": "What does ortstate do?"}]
NEW = 6


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Generator, openai.OpenAI]]:
    gen = Generator.from_dir(FOLDER)
    with serve_llm_in_thread(LlmServeConfig(FOLDER, 8, slots=4)) as running:
        yield gen, openai_client(running.url)


def expected(gen: Generator, prompt: list[int], top: int) -> list[tuple[int, float, list[tuple[str, float]]]]:
    """Per generated token: (its id, its logprob, the top tokens' (text, logprob)), from the lone
    Generator's logits."""
    tokens = gen.generate(prompt, NEW, keep_logits=True)
    logits = gen.last_run.logits[:, 0].astype(np.float64)
    logprobs = logits - logits.max(-1, keepdims=True)
    logprobs -= np.log(np.exp(logprobs).sum(-1, keepdims=True))
    out = []
    for step, token in enumerate(tokens):
        order = np.argsort(-logprobs[step], kind="stable")[:top]
        texts = [(gen.tokenizer.decode([int(i)], skip_special_tokens=False), logprobs[step, i]) for i in order]
        out.append((token, float(logprobs[step, token]), texts))
    return out


def chat_prompt(gen: Generator) -> list[int]:
    tok = gen.tokenizer
    return tok.encode(tok.apply_chat_template(MESSAGES, add_generation_prompt=True), add_special_tokens=False)


def check_chat(gen: Generator, content: list[Any], top: int) -> None:
    want = expected(gen, chat_prompt(gen), top)
    assert len(content) == len(want)
    for entry, (token, logprob, tops) in zip(content, want):
        assert entry.token == gen.tokenizer.decode([token], skip_special_tokens=False)
        assert entry.bytes == list(entry.token.encode()) and entry.logprob == pytest.approx(logprob, abs=1e-4)
        assert [t.token for t in entry.top_logprobs] == [t for t, _ in tops]
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx([lp for _, lp in tops], abs=1e-4)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_logprobs_are_the_lone_generators(served: tuple[Generator, openai.OpenAI], stream: bool) -> None:
    gen, api = served
    ask = {"model": "llama", "messages": MESSAGES, "max_tokens": NEW, "temperature": 0, "logprobs": True}
    if not stream:
        reply = api.chat.completions.create(top_logprobs=5, **ask)
        check_chat(gen, reply.choices[0].logprobs.content, 5)
        assert reply.choices[0].logprobs.refusal is None
        return
    content = []
    for part in api.chat.completions.create(top_logprobs=20, stream=True, **ask):
        if part.choices and part.choices[0].logprobs is not None:
            content += part.choices[0].logprobs.content
    check_chat(gen, content, 20)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_completion_logprobs_are_the_lone_generators(served: tuple[Generator, openai.OpenAI], stream: bool) -> None:
    gen, api = served
    ask = {"model": "llama", "prompt": PROMPT, "max_tokens": NEW, "temperature": 0, "logprobs": 3}
    if stream:
        tokens, logprobs, tops, offsets = [], [], [], []
        for part in api.completions.create(stream=True, **ask):
            lp = part.choices[0].logprobs
            if lp is not None:
                tokens, logprobs = tokens + lp.tokens, logprobs + lp.token_logprobs
                tops, offsets = tops + lp.top_logprobs, offsets + lp.text_offset
    else:
        lp = api.completions.create(**ask).choices[0].logprobs
        tokens, logprobs, tops, offsets = lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset
    want = expected(gen, PROMPT, 3)
    assert tokens == [gen.tokenizer.decode([t], skip_special_tokens=False) for t, _, _ in want]
    assert logprobs == pytest.approx([lp for _, lp, _ in want], abs=1e-4)
    assert offsets == [sum(len(t) for t in tokens[:k]) for k in range(len(tokens))]
    for got, (token, logprob, top) in zip(tops, want):
        wanted = dict(top)
        wanted.setdefault(gen.tokenizer.decode([token], skip_special_tokens=False), logprob)
        assert list(got) == list(wanted) and list(got.values()) == pytest.approx(list(wanted.values()), abs=1e-4)


def test_no_logprobs_without_asking_and_greedy_keeps_its_argmax_path(served: tuple[Generator, openai.OpenAI]) -> None:
    gen, api = served
    reply = api.completions.create(model="llama", prompt=PROMPT, max_tokens=NEW, temperature=0)
    assert reply.choices[0].logprobs is None
    assert reply.choices[0].text == gen.tokenizer.decode(gen.generate(PROMPT, NEW))
    options = SearchOptions.build({})
    criteria = StopCriteria((), (), (), None)
    assert Request(0, PROMPT, NEW, options, criteria, sink=print).plain
    assert not Request(1, PROMPT, NEW, options, criteria, sink=print, logprobs=0).plain


@pytest.mark.parametrize(
    ("path", "body", "param", "message"),
    [
        (
            "completions",
            {"prompt": PROMPT, "logprobs": 6},
            "logprobs",
            "logprobs must be an integer from 0 to 5, got 6",
        ),
        (
            "chat/completions",
            {"messages": MESSAGES, "logprobs": True, "top_logprobs": 21},
            "top_logprobs",
            "top_logprobs must be an integer from 0 to 20, got 21",
        ),
        (
            "chat/completions",
            {"messages": MESSAGES, "top_logprobs": 2},
            "top_logprobs",
            "top_logprobs needs logprobs set to true",
        ),
    ],
    ids=["logprobs-6", "top-logprobs-21", "top-without-logprobs"],
)
def test_bad_logprobs_get_openais_400(
    served: tuple[Generator, openai.OpenAI], path: str, body: dict, param: str, message: str
) -> None:
    _, api = served
    with pytest.raises(openai.BadRequestError) as info:
        api.post(f"/{path}", body={"model": "llama", "max_tokens": 2, **body}, cast_to=object)
    assert info.value.status_code == 400
    assert info.value.body == {"message": message, "type": "invalid_request_error", "param": param, "code": None}

"""The OpenAI server's automatic prefix caching: a plain client's chat (no conversation header)
feeds only what no stream held, ``usage.prompt_tokens_details.cached_tokens`` says exactly how
much it did not (streamed too), the answers are a lone Generator's; ``n`` > 1, logprobs and stop
strings give what a server without the cache gives; ``prefix_cache=False`` caches nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import openai_client as client
from oracle import REPO

from ortstate.generate import Generator
from ortstate.serve import LlmServeConfig, serve_llm_in_thread

LLM = REPO / "models" / "llm"
TURNS = ["Hello there", "And then?", "Why so?", "Tell me more."]
PROMPT = "The quick brown fox jumps over the lazy dog and runs into the woods"


@pytest.fixture(scope="module")
def llama() -> Generator:
    return Generator.from_dir(LLM / "llama")


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_a_plain_clients_chat_feeds_only_what_no_stream_held(llama: Generator) -> None:
    """Each turn resends the whole history; cached_tokens is the longest start of its prompt that
    an earlier turn's stream held (its prompt and answer, the answer's last token never fed),
    short of its last token; the answer is a lone Generator's for the whole prompt."""
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 8, slots=4)) as running:
        api, messages, held = client(running.url), [], []
        for k, text in enumerate(TURNS):
            messages.append({"role": "user", "content": text})
            reply = api.chat.completions.create(
                model="llama", messages=messages, max_tokens=6, temperature=0, extra_body={"return_token_ids": True}
            )
            choice = reply.choices[0]
            prompt, tokens = choice.prompt_token_ids, choice.token_ids
            expected = max((min(_common(prompt, h), len(prompt) - 1) for h in held), default=0)
            assert reply.usage.prompt_tokens_details.cached_tokens == expected and (expected > 10) == (k > 0), k
            assert tokens == llama.generate(prompt, 6), k
            held.append(prompt + tokens[:-1])
            messages.append({"role": "assistant", "content": choice.message.content})
        again = api.chat.completions.create(
            model="llama",
            messages=messages[:-1],
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        usage = [c.usage for c in again if c.usage is not None]
        assert [u.prompt_tokens_details.cached_tokens for u in usage] == [len(prompt) - 1]  # all held


def _sampled(prefix_cache: bool) -> tuple[list[str], list[Any], int]:
    """A completion warmed by another on its prompt's start, then 2 sampled choices with logprobs
    and a stop string: their texts, their logprobs, the cached tokens."""
    config = LlmServeConfig(LLM / "llama", 8, slots=4, prefix_cache=prefix_cache)
    with serve_llm_in_thread(config) as running:
        api = client(running.url)
        api.completions.create(model="llama", prompt=PROMPT, max_tokens=4, temperature=0)
        reply = api.completions.create(
            model="llama",
            prompt=PROMPT + " again",
            max_tokens=12,
            n=2,
            seed=3,
            temperature=0.9,
            logprobs=2,
            stop=[" the"],
        )
        assert running.service.batcher.prefix_cache == prefix_cache
    texts = [c.text for c in reply.choices]
    return texts, [c.logprobs for c in reply.choices], reply.usage.prompt_tokens_details.cached_tokens


def test_choices_logprobs_and_stop_strings_are_a_cold_servers() -> None:
    warm, cold = _sampled(True), _sampled(False)
    assert warm[0] == cold[0] and warm[2] > 10 and cold[2] == 0
    for hot, fresh in zip(warm[1], cold[1]):
        assert hot.tokens == fresh.tokens
        np.testing.assert_allclose(hot.token_logprobs, fresh.token_logprobs, atol=1e-4, rtol=0)

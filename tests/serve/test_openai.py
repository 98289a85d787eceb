"""``ortstate serve`` for an LLM folder, through the official ``openai`` client (sync, async, streamed):
completions and chat on every committed folder the batcher takes, each equal to a lone Generator's
tokens and text; sampling with a seed; stop strings; 32 concurrent streamed chats; a client that
leaves mid-stream cancels its request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from conftest import openai_client as client
from conftest import serving
from oracle import REPO

from ortstate.generate import Generator
from ortstate.serve import LlmServeConfig, serve_llm_in_thread

LLM = REPO / "models" / "llm"
# Every decoder-only folder but the attention-free SSMs (mamba, falcon_mamba): the batcher's pool
# holds KV caches (test_openai_errors.py checks that those two are refused).
POOLED = [
    "dbrx",
    "gemma2",
    "gemma3n_text",
    "gpt2",
    "gpt_neox_japanese",
    "gpt_oss",
    "granitemoehybrid",
    "lfm2",
    "llama",
    "llama_fp16",
    "llama_int4",
    "llama_int8",
    "mistral",
    "mixtral",
    "phi3",
    "qwen2",
    "qwen3",
    "qwen3_5",
    "qwen3_next",
    "xglm",
    "zamba2",
]
PROMPT = "Stateful models run in ONNX Runtime."
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What does ortstate do?"}]


def chat_ids(gen: Generator, messages: list[dict[str, str]]) -> list[int]:
    tok = gen.tokenizer
    return tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True), add_special_tokens=False)


def finish(gen: Generator, tokens: list[int], max_tokens: int) -> str:
    return "stop" if tokens[-1] in gen.config.eos_token_ids else "length" if len(tokens) == max_tokens else "stop"


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def used(response: Any) -> dict[str, Any]:
    return {k: getattr(response.usage, k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


@pytest.fixture(scope="module")
def llama() -> Iterator[tuple[Generator, str, Any]]:
    """llama's lone Generator and a server of it: (generator, URL, service)."""
    gen = Generator.from_dir(LLM / "llama")
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 64, slots=8)) as running:
        yield gen, running.url, running.service


@pytest.mark.parametrize("name", POOLED)
def test_completions_and_chat_equal_a_lone_generator(name: str) -> None:
    gen = Generator.from_dir(LLM / name)
    tok = gen.tokenizer
    with serve_llm_in_thread(LlmServeConfig(LLM / name, 8, slots=4)) as running:
        api = client(running.url)
        assert [m.id for m in api.models.list().data] == [name]

        ids = tok.encode(PROMPT)
        want = gen.generate(ids, 6)
        extra = {"return_token_ids": True}
        got = api.completions.create(model=name, prompt=PROMPT, max_tokens=6, temperature=0, extra_body=extra)
        choice = got.choices[0]
        assert (choice.prompt_token_ids, choice.token_ids, choice.text) == (ids, want, tok.decode(want))
        assert choice.finish_reason == finish(gen, want, 6) and used(got) == usage(len(ids), len(want))

        want = gen.generate([18, 152, 24], 5)
        got = api.completions.create(model=name, prompt=[18, 152, 24], max_tokens=5, temperature=0)
        assert got.choices[0].text == tok.decode(want) and used(got) == usage(3, len(want))

        ids = chat_ids(gen, MESSAGES)
        reply = gen.generate(ids, 6)
        whole = api.chat.completions.create(model=name, messages=MESSAGES, max_tokens=6, temperature=0)
        assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
        assert whole.choices[0].message.content == tok.decode(reply)
        assert whole.choices[0].finish_reason == finish(gen, reply, 6) and used(whole) == usage(len(ids), len(reply))

        chunks = list(
            api.chat.completions.create(
                model=name,
                messages=MESSAGES,
                max_completion_tokens=6,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=extra,
            )
        )
        # a role chunk, a chunk per token, the finish, the usage
        assert len(chunks) == len(reply) + 3 and chunks[0].choices[0].delta.role == "assistant"
        tokens = chunks[1:-2]
        assert [c.choices[0].token_ids for c in tokens] == [[t] for t in reply]
        assert "".join(c.choices[0].delta.content for c in tokens) == tok.decode(reply)
        assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None] * (len(reply) + 1) + [finish(gen, reply, 6)]
        assert chunks[-1].choices == [] and used(chunks[-1]) == usage(len(ids), len(reply))
        # every stream ended: those left open are the prefix cache's, and closing it closes them all
        batcher = running.service.batcher
        assert running.service.in_flight == 0 and len(batcher.pool.streams) == batcher.stats()["cached"]
        batcher.reset_prefix_cache()
        assert batcher.pool.streams == []


@pytest.mark.parametrize("name", ["gpt_oss", "xglm", "gpt_neox_japanese", "gemma3n_text"])
def test_the_command_serves_decoders_once_refused(name: str) -> None:
    """``ortstate serve`` on a folder it refused (sinks; eager attention and caches shared by two
    layers: caches the pool copies) starts and answers as a lone Generator."""
    gen = Generator.from_dir(LLM / name)
    ids = gen.tokenizer.encode(PROMPT)
    want = gen.generate(ids, 6)
    with serving(model=LLM / name) as (_, url):
        got = client(url).completions.create(model=name, prompt=PROMPT, max_tokens=6, temperature=0)
    assert got.choices[0].text == gen.tokenizer.decode(want)


def test_sampling_with_a_seed_equals_the_generator(llama: tuple[Generator, str, Any]) -> None:
    gen, url, _ = llama
    ids = gen.tokenizer.encode(PROMPT)
    greedy = gen.generate(ids, 8, stop_at_eos=False, stop_token_ids=[])
    want = gen.generate(ids, 8, do_sample=True, temperature=0.8, top_p=0.9, top_k=0, seed=5)
    assert want != greedy[: len(want)]
    api = client(url)
    got = api.completions.create(
        model="llama",
        prompt=PROMPT,
        max_tokens=8,
        temperature=0.8,
        top_p=0.9,
        seed=5,
        extra_body={"return_token_ids": True},
    )
    assert got.choices[0].token_ids == want and got.choices[0].text == gen.tokenizer.decode(want)


def test_stop_strings_end_the_text_before_them(llama: tuple[Generator, str, Any]) -> None:
    gen, url, _ = llama
    api = client(url)
    tok = gen.tokenizer
    ids = tok.encode(PROMPT)
    free = tok.decode(gen.generate(ids, 16))
    stop = free[6:9]
    cut = free.index(stop)
    assert 0 < cut and stop.strip()
    want = gen.generate(ids, 16, stop_strings=[stop])
    extra = {"return_token_ids": True}
    got = api.completions.create(
        model="llama", prompt=PROMPT, max_tokens=16, temperature=0, stop=["never there", stop], extra_body=extra
    )
    choice = got.choices[0]
    assert (choice.text, choice.finish_reason, choice.token_ids) == (free[:cut], "stop", want)
    assert used(got) == usage(len(ids), len(want))
    chunks = list(
        api.completions.create(model="llama", prompt=PROMPT, max_tokens=16, temperature=0, stop=stop, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks) == free[:cut] and chunks[-1].choices[0].finish_reason == "stop"


def test_32_concurrent_streamed_chats_each_equal_its_lone_run(llama: tuple[Generator, str, Any]) -> None:
    gen, url, service = llama
    conversations = [[{"role": "user", "content": f"Question {i}: {PROMPT[: 5 + i]}"}] for i in range(32)]
    sampled = {i: 100 + i for i in range(0, 32, 4)}  # every fourth samples, with a seed of its own
    wants = []
    for i, messages in enumerate(conversations):
        search = {"do_sample": True, "top_k": 0, "temperature": 0.7, "seed": sampled[i]} if i in sampled else {}
        wants.append(gen.tokenizer.decode(gen.generate(chat_ids(gen, messages), 8, **search)))

    async def run() -> list[str]:
        api = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)

        async def one(i: int) -> str:
            search = {"temperature": 0.7, "seed": sampled[i]} if i in sampled else {"temperature": 0}
            stream = await api.chat.completions.create(
                model="llama", messages=conversations[i], max_tokens=8, stream=True, **search
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream])

        try:
            return await asyncio.gather(*(one(i) for i in range(32)))
        finally:
            await api.close()

    assert asyncio.run(run()) == wants
    assert service.batcher.pool.stats().max_batch > 1  # they were batched


class Slowed:
    """A batcher whose streams hand over a token every 20 ms, and record how they ended."""

    def __init__(self, batcher: Any) -> None:
        self.batcher = batcher
        self.ended: list[tuple[int, bool]] = []  # (tokens handed over, ran to its end)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.batcher, name)

    async def stream(self, prompt: list[int], max_new_tokens: int, **search: Any) -> AsyncIterator[int]:
        count, whole = 0, False
        try:
            async for token in self.batcher.stream(prompt, max_new_tokens, **search):
                await asyncio.sleep(0.02)
                count += 1
                yield token
            whole = True
        finally:
            self.ended.append((count, whole))


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_a_client_that_leaves_cancels_its_request(llama: tuple[Generator, str, Any], streamed: bool) -> None:
    gen, url, service = llama
    slowed = Slowed(service.batcher)
    service.batcher = slowed
    try:
        api = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=0.3)
        if streamed:
            stream = api.completions.create(model="llama", prompt=PROMPT, max_tokens=100, temperature=0, stream=True)
            next(iter(stream))
            stream.close()
        else:
            with pytest.raises(openai.APITimeoutError):  # the client gives up after 0.3 s
                api.completions.create(model="llama", prompt=PROMPT, max_tokens=100, temperature=0)
        deadline = time.monotonic() + 10
        while (not slowed.ended or service.in_flight) and time.monotonic() < deadline:
            time.sleep(0.01)
        ((count, whole),) = slowed.ended
        assert not whole and count < 50 and service.in_flight == 0
        while slowed.batcher.stats()["running"] and time.monotonic() < deadline:  # ended at the engine's next tick
            time.sleep(0.01)
        slowed.batcher.reset_prefix_cache()  # (its stream the prefix cache's: closed with it)
        assert slowed.batcher.pool.streams == []
    finally:
        service.batcher = slowed.batcher


def test_the_folder_name_is_the_model_id_unless_named(tmp_path: Path) -> None:
    with serve_llm_in_thread(LlmServeConfig(LLM / "qwen2", 4, slots=2, model_name="tiny-qwen")) as running:
        api = client(running.url)
        assert [m.id for m in api.models.list().data] == ["tiny-qwen"]
        card = api.models.retrieve("tiny-qwen")
        assert (card.id, card.owned_by, card.max_model_len) == ("tiny-qwen", "ortstate", 128)


def test_a_developer_message_is_a_system_one(llama: tuple[Generator, str, Any]) -> None:
    gen, url, _ = llama
    api = client(url)
    as_developer = [{"role": "developer", "content": "Be brief."}, MESSAGES[1]]
    got = api.chat.completions.create(
        model="llama", messages=as_developer, max_tokens=6, temperature=0, extra_body={"return_token_ids": True}
    )
    assert got.choices[0].prompt_token_ids == chat_ids(gen, MESSAGES)
    assert got.choices[0].token_ids == gen.generate(chat_ids(gen, MESSAGES), 6)

"""``ContinuousBatcher`` with ``json_schema=`` on the committed tiny models (random weights: the grammar
alone makes the answers valid): every answer parses and validates and equals a lone Generator's
(greedy, sampled, ``n`` choices, streamed); the masks of a tick's constrained rows are one call, and
unconstrained requests in the same ticks get a lone Generator's unconstrained tokens."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from functools import cache

import jsonschema
import pytest
from oracle import REPO
from test_structured import SCHEMAS

import ortstate.generate.executor as executor_module
from ortstate.generate import ContinuousBatcher, GenerationError, Generator

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="onnxruntime 1.23 (Python 3.10) lacks GroupQueryAttention's causal attribute"
)
LLM = REPO / "models" / "llm"
PROMPTS = [[1, 18, 152, 24], [1, 7, 9], [1, 240, 209, 33, 5, 61]]
BUDGET = 100  # the tiny models' context is 128 positions
SEARCHES = {
    "greedy": {},
    "sampled": {"do_sample": True, "seed": 3},
    "hot": {"do_sample": True, "seed": 4, "temperature": 2.0, "top_k": 0},
}


@cache
def generator(family: str) -> Generator:
    return Generator.from_dir(LLM / family)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def family(request: pytest.FixtureRequest) -> Iterator[tuple[str, ContinuousBatcher]]:
    with ContinuousBatcher.from_dir(LLM / request.param, slots=8) as batcher:
        yield request.param, batcher


def _valid(gen: Generator, tokens: list[int], schema: dict) -> None:
    eos = set(gen.config.eos_token_ids)
    jsonschema.validate(json.loads(gen.tokenizer.decode([t for t in tokens if t not in eos])), schema)


@pytest.mark.parametrize("search", sorted(SEARCHES))
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_answer_validates_and_equals_a_lone_generator(family, name: str, search: str) -> None:
    model, batcher = family
    gen, schema, options = generator(model), SCHEMAS[name], SEARCHES[search]
    got = batcher.generate_many(PROMPTS, BUDGET, json_schema=schema, **options)
    assert got == [gen.generate(p, BUDGET, json_schema=schema, **options) for p in PROMPTS]
    for tokens in got:
        _valid(gen, tokens, schema)


def test_n_choices_each_follow_their_own_grammar(family) -> None:
    model, batcher = family
    gen, schema = generator(model), SCHEMAS["recursive"]
    search = {"json_schema": schema, "do_sample": True, "seed": 9, "n": 3}
    got = batcher.generate_many(PROMPTS[:2], BUDGET, **search)
    assert got == gen.generate_batch(PROMPTS[:2], BUDGET, **search)
    assert len({tuple(t) for t in got}) > 1
    for tokens in got:
        _valid(gen, tokens, schema)


def test_streamed_answers_equal_a_lone_generator(family) -> None:
    model, batcher = family
    gen, schema = generator(model), SCHEMAS["array"]

    async def run() -> list[list[int]]:
        async def one(prompt: list[int], seed: int) -> list[int]:
            return [t async for t in batcher.stream(prompt, BUDGET, json_schema=schema, do_sample=True, seed=seed)]

        return list(await asyncio.gather(*(one(p, i) for i, p in enumerate(PROMPTS))))

    got = asyncio.run(run())
    assert got == [gen.generate(p, BUDGET, json_schema=schema, do_sample=True, seed=i) for i, p in enumerate(PROMPTS)]
    for tokens in got:
        _valid(gen, tokens, schema)


def test_a_tick_masks_its_constrained_rows_in_one_call_and_the_others_pay_nothing(family, monkeypatch) -> None:
    """Constrained and unconstrained requests (greedy and sampled) at once: one mask call a tick,
    holding the constrained rows only; every request's tokens are a lone Generator's."""
    model, batcher = family
    gen, schema = generator(model), SCHEMAS["recursive"]
    calls: list[int] = []
    real = executor_module.mask_logits

    def counted(logits, matchers) -> None:
        calls.append(sum(m is not None for m in matchers))
        real(logits, matchers)

    monkeypatch.setattr(executor_module, "mask_logits", counted)
    sampled = {"do_sample": True, "seed": 5}
    prompt = PROMPTS[0]
    ticks = batcher.ticks
    results: dict[str, list[list[int]]] = {}

    async def run() -> None:
        async def one(key: str, **search) -> None:
            results[key] = [[t async for t in batcher.stream(prompt, 40, **search)]]

        await asyncio.gather(
            one("schema", json_schema=schema),
            one("schema sampled", json_schema=schema, **sampled),
            one("plain"),
            one("plain sampled", **sampled),
        )

    asyncio.run(run())
    assert results["plain"] == [gen.generate(prompt, 40)]
    assert results["plain sampled"] == [gen.generate(prompt, 40, **sampled)]
    assert results["schema"] == [gen.generate(prompt, 40, json_schema=schema)]
    assert results["schema sampled"] == [gen.generate(prompt, 40, json_schema=schema, **sampled)]
    assert len(calls) <= batcher.ticks - ticks  # at most one call a tick
    assert sum(calls) == len(results["schema"][0]) + len(results["schema sampled"][0])  # each pick masked once
    assert max(calls) == 2  # both constrained rows in one call


def test_a_schema_needs_enough_new_tokens_and_a_good_schema(family) -> None:
    model, batcher = family
    with pytest.raises(GenerationError, match="too few for the shortest answer") as info:
        batcher.generate_many(PROMPTS[:1], 3, json_schema=SCHEMAS["object"])
    assert info.value.field == "max_new_tokens"
    with pytest.raises(GenerationError, match="Unimplemented keys") as info:
        batcher.generate_many(PROMPTS[:1], 20, json_schema={"not": {"type": "string"}})
    assert info.value.field == "json_schema"


def test_a_schema_needs_the_tokenizer(tmp_path) -> None:
    for path in (LLM / "llama").iterdir():
        if path.name != "tokenizer.json":
            (tmp_path / path.name).symlink_to(path)
    with ContinuousBatcher.from_dir(tmp_path, slots=2) as batcher:
        assert batcher.generate_many(PROMPTS[:1], 4) == [generator("llama").generate(PROMPTS[0], 4)]
        with pytest.raises(GenerationError, match="json_schema needs the model's tokenizer .*tokenizer.json") as info:
            batcher.generate_many(PROMPTS[:1], 20, json_schema={"type": "object"})
    assert info.value.field == "json_schema"

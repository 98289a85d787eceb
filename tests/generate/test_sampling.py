"""vLLM's sampling options in Generator and ContinuousBatcher, against a plain numpy reference on the
real logits of committed LLMs: each step's token is the one the reference picks from that step's
logits (the tokens so far, the row's own uniform draw); the batcher gives the Generator's tokens;
a vanishing temperature gives greedy's tokens for every seed, with no numpy warning; ``n`` choices
share one prefill and choice ``i`` is what ``seed + i`` gives alone; a prompt past the model's
context is refused up front."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from oracle import assert_one_line_error, run_cli

from ortstate.errors import GenerationError
from ortstate.generate import ContinuousBatcher, Generator
from ortstate.generate.pooled_decoder import pool_decoder

LLM = Path(__file__).resolve().parents[2] / "models" / "llm"
FAMILIES = ["llama", "gpt2"]
SEED = 7

# each option alone, then together (top_k given: Generator's default is transformers' 50)
CASES: dict[str, dict[str, Any]] = {
    "greedy": {},
    "repetition_penalty": {"repetition_penalty": 1.8},
    "presence_penalty": {"presence_penalty": 1.5},
    "frequency_penalty": {"frequency_penalty": 0.7, "presence_penalty": -0.4},
    "logit_bias": {"logit_bias": {77: -100.0, 5: 4.0, 9: 2.5}},
    "min_tokens": {"min_tokens": 6, "logit_bias": {2: 9.0}, "stop_token_ids": [9]},  # eos (2) made likely
    "temperature": {"do_sample": True, "temperature": 0.7, "top_k": 0},
    "top_k": {"do_sample": True, "top_k": 5},
    "top_k_off": {"do_sample": True, "top_k": -1, "temperature": 1.4},
    "top_p": {"do_sample": True, "top_p": 0.8, "top_k": 0},
    "min_p": {"do_sample": True, "min_p": 0.2, "top_k": 0, "temperature": 1.3},
    "everything": {
        "do_sample": True,
        "temperature": 0.9,
        "top_k": 40,
        "top_p": 0.9,
        "min_p": 0.05,
        "repetition_penalty": 1.2,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "logit_bias": {7: 3.0, 2: 2.0},
        "min_tokens": 3,
    },
    "greedy_everything": {
        "repetition_penalty": 0.8,
        "presence_penalty": -1.0,
        "frequency_penalty": 2.0,
        "logit_bias": {11: 1.5},
        "min_tokens": 2,
    },
}


def reference_pick(logits: np.ndarray, options: dict[str, Any], prompt: list[int], output: list[int], stops: set[int],
                   uniform: float) -> int:  # fmt: skip
    """One row's token as vLLM's sampler picks it, written out plainly in float64: min_tokens and
    logit_bias, the repetition penalty (prompt and output), frequency and presence (output), then
    greedy's argmax, or temperature, min_p, top_k, top_p and the inverse CDF at ``uniform``."""
    x = logits.astype(np.float64)
    if len(output) < options.get("min_tokens", 0):
        for t in stops:
            x[t] = -np.inf
    for t, bias in options.get("logit_bias", {}).items():
        x[t] += bias
    r = options.get("repetition_penalty", 1.0)
    for t in set(prompt) | set(output):
        x[t] = x[t] / r if x[t] > 0 else x[t] * r
    for t, count in Counter(output).items():
        x[t] -= options.get("frequency_penalty", 0.0) * count + options.get("presence_penalty", 0.0)
    if not options.get("do_sample"):
        return int(np.argmax(x))
    with np.errstate(over="ignore", under="ignore"):
        p = np.exp((x - x.max()) / options.get("temperature", 1.0))
    p[p < options.get("min_p", 0.0) * p.max()] = 0.0
    k = options.get("top_k", 50)
    if 0 < k < len(p):
        p[p < np.sort(p)[::-1][k - 1]] = 0.0
    order = np.argsort(p, kind="stable")
    removed = np.cumsum(p[order] / p.sum()) <= 1 - options.get("top_p", 1.0)
    removed[-1] = False
    p[order[removed]] = 0.0
    return int(np.argmax(np.cumsum(p / p.sum()) > uniform))


def replay(gen: Generator, prompts: list[list[int]], options: dict[str, Any], steps: int) -> list[list[int]]:
    """The reference's tokens on the logits the generator's last run kept (each row prompt ``p``'s
    choice ``i`` of ``n``, sampled with ``SEED + i``)."""
    run = gen.last_run
    assert run is not None and run.logits is not None
    n = options.get("n", 1)
    stops = set(gen.config.eos_token_ids) | set(options.get("stop_token_ids", []))
    rows = []
    for row in range(len(prompts) * n):
        prompt, rng, output = prompts[row // n], np.random.default_rng(SEED + row % n), []
        for step in range(steps):
            uniform = rng.random() if options.get("do_sample") else 0.0
            output.append(reference_pick(run.logits[step, row], options, prompt, output, stops, uniform))
            if output[-1] in stops and len(output) > options.get("min_tokens", 0):
                break
        rows.append(output)
    return rows


@pytest.fixture(scope="module")
def generators() -> Iterator[dict[str, Generator]]:
    yield {name: Generator.from_dir(LLM / name) for name in FAMILIES}


@pytest.fixture(scope="module")
def batchers() -> Iterator[dict[str, ContinuousBatcher]]:
    made = {name: ContinuousBatcher.from_dir(LLM / name, slots=8, max_num_batched_tokens=5) for name in FAMILIES}
    yield made
    for batcher in made.values():
        batcher.close()


def _prompts(gen: Generator) -> list[list[int]]:
    return [[18, 152, 24, 240, 209, 77, 77], [5, 6, 7]]  # the second is left-padded beside the first


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("family", FAMILIES)
def test_each_option_against_the_reference_and_in_the_batcher(
    family: str, case: str, generators: dict[str, Generator], batchers: dict[str, ContinuousBatcher]
) -> None:
    gen, options = generators[family], CASES[case]
    prompts = _prompts(gen)
    rows = gen.generate_batch(prompts, 12, keep_logits=True, seed=SEED, **options)
    assert rows == replay(gen, prompts, options, 12)
    plain = gen.generate_batch(prompts, 12, seed=SEED, do_sample=options.get("do_sample", False))
    if case != "greedy":
        assert rows != plain, "the option changed nothing: the case proves nothing"
    assert batchers[family].generate_many(prompts, 12, seed=SEED, **options) == rows


@pytest.mark.parametrize("temperature", [1e-40, 1e-300, 5e-324])
def test_a_vanishing_temperature_gives_greedy_tokens_for_every_seed(
    temperature: float, generators: dict[str, Generator], batchers: dict[str, ContinuousBatcher]
) -> None:
    gen, prompts = generators["llama"], _prompts(generators["llama"])
    greedy = gen.generate_batch(prompts, 10, stop_at_eos=False)
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        for seed in range(5):
            search = {"do_sample": True, "temperature": temperature, "seed": seed, "top_k": 0}
            assert gen.generate_batch(prompts, 10, stop_at_eos=False, **search) == greedy
            assert batchers["llama"].generate_many(prompts, 10, stop_at_eos=False, **search) == greedy


def test_n_choices_share_one_prefill_and_each_is_its_seed_alone(
    generators: dict[str, Generator], batchers: dict[str, ContinuousBatcher], monkeypatch: pytest.MonkeyPatch
) -> None:
    gen, prompts = generators["llama"], _prompts(generators["llama"])
    options = {"do_sample": True, "top_k": 20, "temperature": 1.2, "n": 3}
    fed: list[tuple[int, ...]] = []
    feed = gen.stepper.feed
    monkeypatch.setattr(gen.stepper, "feed", lambda ids, *a: fed.append(ids.shape) or feed(ids, *a))
    rows = gen.generate_batch(prompts, 8, keep_logits=True, seed=SEED, **options)
    assert fed[0] == (2, 7) and set(fed[1:]) == {(6, 1)}  # the prompts once, then 2 x 3 rows
    assert rows == replay(gen, prompts, options, 8)
    alone = [
        gen.generate(p, 8, do_sample=True, top_k=20, temperature=1.2, seed=SEED + i) for p in prompts for i in range(3)
    ]
    assert rows == alone and len(set(map(tuple, rows))) == 6
    batcher = batchers["llama"]
    forks: list[int] = []
    fork = batcher.pool.fork

    def whole(sid: int, *cut: int) -> int:  # forks of whole streams (not of a cached prompt's start)
        forks.extend([] if cut else [sid])
        return fork(sid, *cut)

    monkeypatch.setattr(batcher.pool, "fork", whole)
    assert batcher.generate_many(prompts, 8, seed=SEED, **options) == rows
    assert len(forks) == 4  # two prompts, two more choices each
    assert len(batcher.pool.streams) == batcher.stats()["cached"]  # all given back, to the cache

    async def streamed() -> list[list[int]]:
        got: list[list[int]] = [[], [], []]
        async for index, token in batcher.stream_choices(prompts[1], 8, seed=SEED, **options):
            got[index].append(token)
        return got

    import asyncio

    assert asyncio.run(streamed()) == rows[3:]


def test_a_cancelled_choice_ends_and_the_others_go_on(batchers: dict[str, ContinuousBatcher]) -> None:
    """stream_choices' cancel(i) ends choice i at the engine's next tick (a server cuts it at a stop
    string); the other choices run to their limit with the tokens they have uncancelled."""
    import asyncio

    batcher, prompt, limit = batchers["llama"], [18, 152, 24, 240, 209], 100
    options = {"do_sample": True, "top_k": 20, "seed": SEED, "n": 3, "stop_at_eos": False}
    whole = batcher.generate_many([prompt], limit, **options)

    async def cancelling() -> list[list[int]]:
        got: list[list[int]] = [[], [], []]
        stream = batcher.stream_choices(prompt, limit, **options)
        async for index, token in stream:
            got[index].append(token)
            if index == 1 and len(got[1]) == 2:
                stream.cancel(1)
        return got

    got = asyncio.run(cancelling())
    assert got[0] == whole[0] and got[2] == whole[2]
    # the engine runs ahead of this loop by the ticks it made before the cancel reached it: far
    # fewer than the 98 left (each tick waits for nothing but its run)
    assert got[1] == whole[1][: len(got[1])] and 2 <= len(got[1]) < limit
    assert len(batcher.pool.streams) == batcher.stats()["cached"]


@pytest.mark.parametrize("steps", [1, 4])
def test_after_n_choices_the_state_holds_their_rows(steps: int, generators: dict[str, Generator]) -> None:
    """Continuing (reset=False) after n choices takes one prompt per choice, and equals a generation
    over each choice's whole history (one step: the rows are not made yet, their histories are re-fed)."""
    gen = generators["llama"]
    prompt = [18, 152, 24, 240, 209]
    choices = gen.generate_batch([prompt], steps, stop_at_eos=False, do_sample=True, seed=3, n=3)
    assert gen.history == [prompt + c for c in choices]
    more = gen.generate_batch([[5], [6], [7]], 4, stop_at_eos=False, reset=False)
    assert more == [gen.generate(prompt + c + [t], 4, stop_at_eos=False) for c, t in zip(choices, [5, 6, 7])]


def test_n_choices_where_the_cache_cannot_be_reordered() -> None:
    """T5's cross-attention caches are not read through beam_idx: each choice's row is prefilled."""
    gen = Generator.from_dir(LLM / "t5")
    gen.encode(np.load(LLM / "t5" / "encoder_input.npy"))
    start = [gen.config.decoder_start_token_id]
    rows = gen.generate_batch([start], 6, stop_at_eos=False, do_sample=True, seed=4, n=2)
    assert rows == [gen.generate(start, 6, stop_at_eos=False, do_sample=True, seed=4 + i) for i in range(2)]


def test_kv_pool_fork_copies_a_stream_in_the_arena_or_from_where_it_was_moved() -> None:
    pooled = pool_decoder(LLM / "llama", slots=3, kv_cache_bytes=None, max_context=40, threads=None,
                          int8_activations=False, sess_options=None, model=None)  # fmt: skip
    pool, rules = pooled.pool, pooled.rules
    prompt = [18, 152, 24, 240, 209]

    def step(sid: int, tokens: list[int], past: int) -> np.ndarray:
        return pool.step({sid: rules.feeds(np.array([tokens], np.int64), past)})[sid]["logits"][0, -1]

    lone = pool.open()
    want = [step(lone, prompt + [77], 0), step(lone, [5], 6)]  # a stream fed it all itself
    pool.close(lone)
    source = pool.open()
    step(source, prompt, 0)
    copy = pool.fork(source)
    assert pool.length(copy) == pool.length(source) == 5
    for sid in (source, copy):  # the copy and its source go on alike, each on its own
        np.testing.assert_allclose(step(sid, [77], 5), want[0], atol=1e-5)
    third = pool.fork(copy)  # every row taken now
    fourth = pool.fork(source)  # no row left: the least recently stepped stream but source (copy) moved out
    assert pool.stats().preempted == 1
    fifth = pool.fork(copy)  # copied from host memory (source moved out for its row)
    assert pool.stats().preempted == 2 and pool.length(fifth) == 6
    for sid in (third, fourth, fifth, copy):
        np.testing.assert_allclose(step(sid, [5], 6), want[1], atol=1e-5)


def test_a_prompt_past_the_context_is_refused_up_front(
    generators: dict[str, Generator], capsys: pytest.CaptureFixture[str]
) -> None:
    gen = generators["gpt2"]  # 128 learned positions (n_positions)
    with pytest.raises(GenerationError) as info:
        gen.generate([1, 2], 500)
    message = "a prompt of 2 tokens and max_new_tokens 500 reach past the model's context of 128 positions (502 > 128)"
    assert str(info.value) == message and info.value.field == "max_new_tokens"
    gen.generate([1, 2], 60, stop_at_eos=False)
    with pytest.raises(GenerationError, match=r"a prompt of 64 tokens and max_new_tokens 65 reach past"):
        gen.generate([3, 4], 65, reset=False)  # the history counts
    code, out, err = run_cli(capsys, "generate", LLM / "gpt2", "--prompt-ids", "1,2", "-n", 500)
    assert (code, out) == (1, "")
    assert_one_line_error(err, message)
    with pytest.raises(GenerationError, match=r"^max_context 4096 is over the model's context of 128 positions"):
        ContinuousBatcher.from_dir(LLM / "gpt2", max_context=4096)
    with ContinuousBatcher.from_dir(LLM / "gpt2") as batcher:
        with pytest.raises(GenerationError, match=r"reach past the pool's max_context of 128 positions \(502 > 128\)"):
            batcher.generate_many([[1, 2]], 500)


@pytest.mark.parametrize(
    ("who", "search", "message"),
    [
        ("generator", {"n": 2, "do_sample": True},
         "generate() returns one sequence: for n > 1 choices use generate_batch(), whose rows are each prompt's n "
         "choices"),
        ("both", {"logit_bias": {300: 1}}, "logit_bias: token id(s) 300 outside the vocabulary (0..255)"),
        ("both", {"min_tokens": 9}, "min_tokens 9 is more than max_new_tokens 4"),
        ("batcher", {"n": 9, "do_sample": True}, "n must be at most the pool's 8 slots, got 9"),
    ],
)  # fmt: skip
def test_requests_the_model_cannot_take(who: str, search: dict, message: str, generators: dict[str, Generator],
                                        batchers: dict[str, ContinuousBatcher]) -> None:  # fmt: skip
    """Refused before anything runs, with the option's name as the error's field."""
    calls = {
        "generator": lambda: generators["llama"].generate([1, 2], 4, **search),
        "batcher": lambda: batchers["llama"].generate_many([[1, 2]], 4, **search),
    }
    for name in calls if who == "both" else [who]:
        with pytest.raises(GenerationError) as info:
            calls[name]()
        assert (str(info.value), info.value.field) == (message, next(iter(search)))


def test_the_command_line_takes_every_option(
    generators: dict[str, Generator], capsys: pytest.CaptureFixture[str]
) -> None:
    gen, prompt = generators["llama"], [18, 152, 24, 240, 209]
    argv = ["generate", LLM / "llama", "--prompt-ids", "18,152,24,240,209", "-n", 8]
    flags = ["--do-sample", "--seed", 5, "--choices", 3, "--min-p", 0.1, "--presence-penalty", 1.2,
             "--frequency-penalty", -0.5, "--logit-bias", "9=3.5", "--logit-bias", "77=-100", "--min-tokens", 2,
             "--top-k", 30]  # fmt: skip
    code, out, err = run_cli(capsys, *argv, *flags)
    assert code == 0, err
    search = {"do_sample": True, "n": 3, "min_p": 0.1, "presence_penalty": 1.2, "frequency_penalty": -0.5,
              "logit_bias": {9: 3.5, 77: -100}, "min_tokens": 2, "top_k": 30, "seed": 5}  # fmt: skip
    assert out == "\n".join(" ".join(map(str, row)) for row in gen.generate_batch([prompt], 8, **search)) + "\n"
    for bad, message in [
        (["--logit-bias", "9"], "--logit-bias expects ID=BIAS (a token id and a number in [-100, 100]), got '9'"),
        (["--logit-bias", "9=101"], "--logit-bias: logit_bias values must be numbers in [-100, 100], got 101.0 for "
         "token 9"),
        (["--choices", 2], "--choices applies to sampling: add --do-sample"),
        (["--do-sample", "--choices", 2, "--num-beams", 2],
         "--choices: n does not apply to beam search (num_beams > 1)"),
        (["--min-tokens", 9], "--min-tokens: min_tokens 9 is more than max_new_tokens 8"),
        (["--presence-penalty", 2.5], "--presence-penalty: presence_penalty must be in [-2, 2], got 2.5"),
    ]:  # fmt: skip
        code, out, err = run_cli(capsys, *argv, *bad)
        assert (code, out) == (2, ""), bad
        assert_one_line_error(err, message)


WARNED = {"divide": "raise", "over": "raise", "invalid": "raise"}  # what numpy warns of by default


def _poisoned(logits: np.ndarray, poison: str) -> np.ndarray:
    out = np.array(logits)
    if poison == "nan":
        out[..., 3] = np.nan
    elif poison == "-inf":
        out[...] = -np.inf
    else:  # two tokens at +inf: the limit of every distribution is those two
        out[..., [3, 9]] = np.inf
    return out


@pytest.mark.parametrize("poison", ["nan", "-inf", "+inf"])
@pytest.mark.parametrize(
    "search",
    [{}, {"repetition_penalty": 1.3}, {"do_sample": True, "temperature": 0.5, "top_p": 0.9, "min_p": 0.1},
     {"num_beams": 2}],
    ids=["greedy", "penalised", "sampled", "beams"],
)  # fmt: skip
def test_logits_with_nan_or_inf_give_a_clear_error_or_their_limit(
    poison: str, search: dict, generators: dict[str, Generator], batchers: dict[str, ContinuousBatcher],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A model can emit NaN or infinite logits (its numbers overflowed): a NaN, or every token at
    -inf, ends the request with an error saying so (never a made-up token: the argmax of NaN is
    the NaN's index); tokens at +inf are the limit, the only ones picked; never a numpy warning
    (numpy's default state ignores underflow only). The batcher goes on serving."""
    from ortstate.generate.executor import Executor

    gen, batcher, prompts = generators["llama"], batchers["llama"], _prompts(generators["llama"])
    feed, pick = gen.stepper.feed, Executor._pick
    monkeypatch.setattr(gen.stepper, "feed", lambda *a: _poisoned(feed(*a), poison))
    monkeypatch.setattr(Executor, "_pick", lambda self, runs, logits: pick(self, runs, _poisoned(logits, poison)))
    calls = [lambda seed: gen.generate_batch(prompts, 4, stop_at_eos=False, seed=seed, **search)]
    if "num_beams" not in search:
        calls.append(lambda seed: batcher.generate_many(prompts, 4, stop_at_eos=False, seed=seed, **search))
    with warnings.catch_warnings(), np.errstate(**WARNED):
        warnings.simplefilter("error")
        for call in calls:
            for seed in range(3):
                if poison == "+inf":
                    rows = call(seed)
                    assert {t for row in rows for t in row} <= {3, 9}
                    if not search.get("do_sample"):
                        assert rows == [[3] * 4] * 2  # greedy: the lowest id among the best
                    continue
                what = "the model's logits hold NaN" if poison == "nan" else "every token is ruled out"
                with pytest.raises(GenerationError, match=f"^{what}.*: no next token can be picked$"):
                    call(seed)
    monkeypatch.undo()
    assert batcher.generate_many(prompts, 4) == gen.generate_batch(prompts, 4)


@pytest.mark.parametrize("penalty", [1e-300, 1e-40, 1e39, 1e300])
@pytest.mark.parametrize("sample", [False, True])
def test_extreme_repetition_penalties_against_the_reference(
    penalty: float, sample: bool, generators: dict[str, Generator], batchers: dict[str, ContinuousBatcher]
) -> None:
    """Any penalty in range is applied exactly (float64): no overflow to a NaN, no numpy warning,
    the reference's tokens (vLLM's float32 would make 1e-300 a division by zero), in beam search too."""
    gen, prompts = generators["llama"], _prompts(generators["llama"])
    options = {"repetition_penalty": penalty, "do_sample": sample, "top_k": 0}
    with warnings.catch_warnings(), np.errstate(**WARNED):
        warnings.simplefilter("error")
        rows = gen.generate_batch(prompts, 8, keep_logits=True, seed=SEED, **options)
        with np.errstate(all="ignore"):
            assert rows == replay(gen, prompts, options, 8)
        assert batchers["llama"].generate_many(prompts, 8, seed=SEED, **options) == rows
        beams = gen.generate(prompts[0], 6, num_beams=2, repetition_penalty=penalty)
    assert beams and set(beams) <= set(range(256))

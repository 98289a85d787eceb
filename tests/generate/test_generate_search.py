"""Generation beyond one greedy prompt, on the committed LLMs, in both ONNX forms, against OpenVINO.

For every attention-only family in ``models/llm/`` (decoder-only; Whisper and T5, and the families
with a recurrent state, for beam search):
greedy decoding of a batch of prompts of different lengths (left-padded) and beam search through the
model's ``beam_idx`` give OpenVINO's tokens exactly, logits within 1e-3 and beam scores within 1e-4,
OpenVINO driven by the independent loops of ``tests/ov_search.py``; a padded batch equals each prompt
alone; a turn continued from the state equals one generation over the whole history; sampling
repeats with its seed and agrees across the forms.
"""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest
from ov_search import LLM, ov_beam_search, ov_greedy

from ortstate.generate import GenerationError, Generator, StateLayout

DECODERS = [
    "dbrx",
    "gemma2",
    "gemma3n_text",
    "gpt2",
    "gpt_neox_japanese",
    "gpt_oss",
    "llama",
    "llava",
    "mistral",
    "mixtral",
    "phi3",
    "qwen2",
    "qwen3",
    "xglm",
]
ENCODER_DECODERS = ["t5", "whisper"]
RECURRENT = [
    "mamba",
    "zamba2",
    "granitemoehybrid",
    "lfm2",
    "qwen3_next",
    "qwen3_5",
    "falcon_mamba",
]  # a state that takes every token in: no padding, but continuation works
FORMS = ("custom-op", "explicit")
ATOL = 1e-3


def reference(family: str) -> dict:
    return json.loads((LLM / family / "reference.json").read_text())


@cache
def generator(family: str, form: str) -> Generator:
    gen = Generator.from_dir(LLM / family, form=form)
    ref = reference(family)
    if ref["encoder"]:
        gen.encode(np.load(LLM / family / ref["encoder"]["input_file"]))
    return gen


def prompts_of(family: str) -> list[list[int]]:
    """The reference prompt and a shorter one made of its tokens (padded by 3 in a batch)."""
    first = reference(family)["prompt_ids"][0]
    return [first, [first[3], first[1]]]


def test_families_are_the_attention_only_ones() -> None:
    """Every decoder-only folder whose variables are all attention caches is tested here."""
    from ortstate.decoders import state_layout
    from ortstate.ir import read_ir

    found = []
    for folder in sorted(p.parent for p in LLM.glob("*/openvino_model.xml")):
        if not state_layout(read_ir(folder / "openvino_model.xml")).recurrent:
            found.append(folder.name)
    variants = {"llama_fp16", "llama_int4", "llama_int8"}  # llama's weights compressed: same family
    assert sorted(set(found) - variants) == sorted(f for f in DECODERS if f != "llava")


# -- greedy over a padded batch, against OpenVINO ---------------------------------------------------------
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", DECODERS)
def test_padded_batch_greedy_matches_openvino_and_single_prompts(family: str, form: str) -> None:
    gen = generator(family, form)
    prompts = prompts_of(family)
    eos = set(gen.config.eos_token_ids)
    tokens = gen.generate_batch(prompts, 6, keep_logits=True)
    assert gen.last_run is not None and gen.last_run.logits is not None
    want, logits = ov_greedy(family, prompts, 6, eos)
    assert tokens == want
    assert gen.last_run.logits.shape == logits.shape
    np.testing.assert_allclose(gen.last_run.logits, logits, atol=ATOL, rtol=0)
    assert [gen.generate(p, 6) for p in prompts] == tokens


# -- beam search through beam_idx, against OpenVINO ---------------------------------------------------------
BEAM_SETTINGS = {
    "defaults": {},
    "stop-token-short": {"length_penalty": 0.5, "early_stopping": True},
    "never": {"length_penalty": 2.0, "early_stopping": "never"},
}


def _assert_same_beams(got: list, want: list) -> None:
    assert [[h.tokens for h in hs] for hs in got] == [[t for t, _ in hs] for hs in want]
    scores = np.array([h.score for hs in got for h in hs])
    np.testing.assert_allclose(scores, [s for hs in want for _, s in hs], atol=1e-4, rtol=0)


@pytest.mark.parametrize("setting", sorted(BEAM_SETTINGS))
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", DECODERS)
def test_beam_search_matches_openvino(family: str, form: str, setting: str) -> None:
    """Two prompts of different lengths, 3 beams; "stop-token" settings stop beams at a token the
    greedy run produces, so finished hypotheses of different lengths compete."""
    gen = generator(family, form)
    prompts = prompts_of(family)
    options = dict(BEAM_SETTINGS[setting])
    stops = set(gen.config.eos_token_ids)
    if setting != "defaults":
        stop = reference(family)["new_tokens"][0][2]
        options["stop_token_ids"] = [stop]
        stops.add(stop)
    best = gen.generate_batch(prompts, 5, num_beams=3, **options)
    assert gen.last_run is not None and gen.last_run.beams is not None
    want = ov_beam_search(family, prompts, 3, 5, stops, **BEAM_SETTINGS[setting])
    _assert_same_beams(gen.last_run.beams, want)
    assert best == [hs[0][0] for hs in want]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", ENCODER_DECODERS)
def test_encoder_decoder_beam_search_matches_openvino(family: str, form: str) -> None:
    """Cross-attention variables are not reordered by beam_idx: every beam is prefilled."""
    gen = generator(family, form)
    assert not gen.layout.expands_by_beam_idx and gen.layout.static
    prompt = reference(family)["prompt_ids"][0][:2]
    gen.generate(prompt, 5, num_beams=2)
    want = ov_beam_search(family, [prompt], 2, 5, set(gen.config.eos_token_ids))
    assert gen.last_run is not None
    _assert_same_beams(gen.last_run.beams or [], want)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", RECURRENT)
def test_recurrent_state_beam_search_matches_openvino(family: str, form: str) -> None:
    """SSM and convolution states are read through Gather(state, beam_idx) too: beam search reorders them."""
    gen = generator(family, form)
    assert gen.layout.recurrent and gen.layout.expands_by_beam_idx
    prompt = reference(family)["prompt_ids"][0]
    gen.generate(prompt, 5, num_beams=3)
    want = ov_beam_search(family, [prompt], 3, 5, set(gen.config.eos_token_ids))
    assert gen.last_run is not None
    _assert_same_beams(gen.last_run.beams or [], want)


def test_beam_search_is_refused_where_the_model_cannot_reorder() -> None:
    gen = generator("llama", "explicit")
    stuck = Generator(gen.session, gen.config, rules=gen.rules, layout=StateLayout(variables=("a", "b"), caches=("a",)))
    with pytest.raises(GenerationError) as info:
        stuck.generate([1, 2], 3, num_beams=2)
    assert str(info.value) == (
        "beam search cannot run on this model: variable(s) a, b are not read through Gather(state, beam_idx), "
        "so the model cannot reorder them between beams"
    )
    with pytest.raises(GenerationError, match=r"^beam search cannot stream: its tokens are only known when it ends$"):
        gen.generate([1, 2], 3, num_beams=2, stream=print)


# -- continuing from the state ------------------------------------------------------------------------------
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", DECODERS + RECURRENT)
def test_continuing_equals_one_generation_over_the_history(family: str, form: str) -> None:
    gen = generator(family, form)
    first, second = prompts_of(family)[0], [7, 11, 13]
    turn1 = gen.generate(first, 4, stop_at_eos=False)
    past = gen.past_tokens
    turn2 = gen.generate(second, 5, stop_at_eos=False, reset=False, keep_logits=True)
    assert gen.past_tokens == past + 1 + len(second) + 4  # the last turn-1 token is fed with turn 2
    assert gen.history == [first + turn1 + second + turn2]
    assert gen.last_run is not None and gen.last_run.logits is not None
    continued = gen.last_run.logits
    whole = gen.generate(first + turn1 + second, 5, stop_at_eos=False, keep_logits=True)
    assert turn2 == whole
    assert gen.last_run is not None and gen.last_run.logits is not None
    np.testing.assert_allclose(continued, gen.last_run.logits, atol=ATOL, rtol=0)
    gen.reset()
    assert gen.history == [] and gen.past_tokens == 0


def test_continuing_a_padded_batch_and_after_beam_search() -> None:
    gen = generator("qwen2", "explicit")
    prompts = prompts_of("qwen2")
    turn1 = gen.generate_batch(prompts, 3, stop_at_eos=False)
    turn2 = gen.generate_batch([[5], [6, 7]], 3, stop_at_eos=False, reset=False)
    whole = [gen.generate(p + t + q, 3, stop_at_eos=False) for p, t, q in zip(prompts, turn1, [[5], [6, 7]])]
    assert turn2 == whole
    # after beam search the cache holds the beams: the next turn re-feeds the chosen history
    best = gen.generate(prompts[0], 4, num_beams=2, stop_at_eos=False)
    after = gen.generate([9], 3, reset=False, stop_at_eos=False)
    assert after == gen.generate(prompts[0] + best + [9], 3, stop_at_eos=False)


def test_recurrent_state_refuses_padding() -> None:
    gen = generator("mamba", "explicit")
    with pytest.raises(GenerationError) as info:
        gen.generate_batch([[1, 2, 3], [4]], 2)
    assert str(info.value) == (
        "prompts of different lengths (1, 3 tokens) need left padding, which this model cannot hide: its "
        "variable(s) cache_params.past.conv.0cache_params.present.conv.0, cache_params.past.conv.1cache_params."
        "present.conv.1, cache_params.past.ssm.0cache_params.present.ssm.0 and 1 more are recurrent states (not "
        "attention caches) that would take in the pad tokens; generate them one at a time"
    )


# -- sampling ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_sampling_repeats_with_its_seed_in_both_forms(family: str) -> None:
    prompt = prompts_of(family)[0]
    options = {"do_sample": True, "temperature": 1.5, "top_k": 40, "top_p": 0.95, "repetition_penalty": 1.2}
    runs = {
        form: [generator(family, form).generate(prompt, 10, seed=s, **options) for s in (1, 2, 3)] for form in FORMS
    }
    assert runs["custom-op"] == runs["explicit"]
    again = generator(family, "explicit").generate(prompt, 10, seed=2, **options)
    assert again == runs["explicit"][1] and generator(family, "explicit").last_run.seed == 2
    assert len({tuple(t) for t in runs["explicit"]}) > 1, "three seeds, one sequence: not sampling"


def test_sampling_limits_equal_greedy() -> None:
    gen = generator("llama", "explicit")
    prompt = prompts_of("llama")[0]
    greedy = gen.generate(prompt, 8, stop_at_eos=False)
    assert greedy == reference("llama")["new_tokens"][0]
    for seed in range(3):
        assert gen.generate(prompt, 8, stop_at_eos=False, do_sample=True, top_k=1, seed=seed) == greedy
        assert gen.generate(prompt, 8, stop_at_eos=False, do_sample=True, temperature=1e-3, seed=seed) == greedy
        assert gen.generate(prompt, 8, stop_at_eos=False, do_sample=True, top_p=1e-6, seed=seed) == greedy
    unseeded = gen.generate(prompt, 4, do_sample=True)
    seed = gen.last_run.seed
    assert seed is not None and gen.generate(prompt, 4, do_sample=True, seed=seed) == unseeded


def test_beam_sampling_repeats_with_its_seed() -> None:
    gen = generator("phi3", "custom-op")
    prompt = prompts_of("phi3")[0]
    one = gen.generate(prompt, 6, num_beams=3, do_sample=True, seed=5, temperature=2.0)
    beams = gen.last_run.beams
    assert gen.generate(prompt, 6, num_beams=3, do_sample=True, seed=5, temperature=2.0) == one
    assert gen.last_run.beams == beams and len(beams[0]) == 3


# -- stop tokens --------------------------------------------------------------------------------------------
def test_stop_token_ids_stop_each_row() -> None:
    gen = generator("gpt2", "explicit")
    prompts = prompts_of("gpt2")
    free = gen.generate_batch(prompts, 8, stop_at_eos=False)
    stop = free[0][3]
    rows = gen.generate_batch(prompts, 8, stop_at_eos=False, stop_token_ids=[stop])
    for free_row, row in zip(free, rows):
        cut = free_row.index(stop) + 1 if stop in free_row else len(free_row)
        assert row == free_row[:cut]
    assert gen.last_run.stop_reasons[0] == "stop_token"

"""The parts of generation that need no model: search options, transformers' logits processors, sampling,
beam bookkeeping limits, stop strings, the incremental text streamer, the tokenizer and its chat template."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from text_tokenizers import CORPUS, byte_bpe, metaspace_bpe, word_tokenizer, write_word_tokenizer

from ortstate.generate import GenerationError, IncrementalDecoder, SearchOptions, TextStreamer, Tokenizer
from ortstate.generate.logits_process import process, repetition_penalty, temperature, top_k, top_p
from ortstate.generate.options import file_defaults
from ortstate.generate.sampler import RowState, choose
from ortstate.generate.stopping import StopCriteria

NEG = -np.inf


# -- options ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"temperature": -1.0}, "temperature must be a number > 0, got -1.0 (for greedy decoding, do not sample)"),
        ({"temperature": 0}, "temperature must be a number > 0, got 0 (for greedy decoding, do not sample)"),
        ({"top_p": 0.0}, "top_p must be in (0, 1], got 0.0"),
        ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5"),
        ({"top_k": -2}, "top_k must be an integer >= 1, or 0 or -1 to keep every token, got -2"),
        ({"top_k": 2.5}, "top_k must be an integer >= 1, or 0 or -1 to keep every token, got 2.5"),
        ({"min_p": 1.5}, "min_p must be in [0, 1], got 1.5"),
        ({"min_p": float("nan")}, "min_p must be in [0, 1], got nan"),
        ({"presence_penalty": 2.5}, "presence_penalty must be in [-2, 2], got 2.5"),
        ({"frequency_penalty": -3}, "frequency_penalty must be in [-2, 2], got -3"),
        ({"logit_bias": {"5": 101}}, "logit_bias values must be numbers in [-100, 100], got 101 for token 5"),
        ({"logit_bias": {"x": 1}}, "logit_bias keys must be token ids (integers >= 0), got 'x'"),
        ({"logit_bias": {-1: 1}}, "logit_bias keys must be token ids (integers >= 0), got -1"),
        ({"logit_bias": {5: 1, "5": 2}}, "logit_bias names a token id twice"),
        ({"logit_bias": [3]}, "logit_bias must map token ids to numbers, got list"),
        ({"min_tokens": -1}, "min_tokens must be an integer >= 0, got -1"),
        ({"n": 0}, "n must be an integer in [1, 128], got 0"),
        ({"n": 10**9, "do_sample": True}, "n must be an integer in [1, 128], got 1000000000"),
        ({"n": 2}, "n must be 1 when decoding greedily, got 2: n > 1 choices need sampling"),
        ({"n": 2, "do_sample": True, "num_beams": 2}, "n does not apply to beam search (num_beams > 1)"),
        ({"min_p": 0.1, "num_beams": 2}, "min_p does not apply to beam search (num_beams > 1)"),
        ({"do_sample": True, "num_beams": 2, "temperature": 1e-40},
         "temperature must be at least 0.01 for beam sampling, got 1e-40 (its scores, summed over steps, would "
         "overflow; for the best beams, do not sample)"),
        ({"num_beams": 0}, "num_beams must be an integer in [1, 128], got 0"),
        ({"num_beams": 10**8}, "num_beams must be an integer in [1, 128], got 100000000"),
        ({"num_beams": True}, "num_beams must be an integer in [1, 128], got True"),
        ({"repetition_penalty": 0}, "repetition_penalty must be a number > 0 (1 = no penalty), got 0"),
        ({"length_penalty": float("nan")}, "length_penalty must be a finite number, got nan"),
        ({"early_stopping": "sometimes"}, "early_stopping must be true, false or 'never', got 'sometimes'"),
        ({"seed": -3}, "seed must be an integer in [0, 2**63), got -3"),
        ({"do_sample": "yes"}, "do_sample must be true or false, got 'yes'"),
        ({"stop_token_ids": [3, -1]}, "stop_token_ids must be non-negative integers, got -1"),
        ({"stop_strings": ["ok", ""]}, "stop_strings must be non-empty strings, got ''"),
        ({"topk": 3}, "unknown generation option(s) topk (known: do_sample, early_stopping, frequency_penalty, "
         "json_schema, length_penalty, logit_bias, min_p, min_tokens, n, num_beams, presence_penalty, "
         "repetition_penalty, seed, "
         "stop_strings, stop_token_ids, temperature, top_k, top_p)"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_errors(given: dict, message: str) -> None:
    with pytest.raises(GenerationError) as info:
        SearchOptions.build(**given)
    assert str(info.value) == message


def test_options_defaults_and_generation_config() -> None:
    options = SearchOptions.build()
    assert (options.do_sample, options.top_k, options.top_p, options.temperature, options.num_beams) == (
        False, 50, 1.0, 1.0, 1,
    )  # fmt: skip
    defaults = file_defaults({"temperature": 0.7, "top_k": 20.0, "do_sample": True, "max_length": 9})
    assert defaults == {"temperature": 0.7, "top_k": 20}
    built = SearchOptions.build(defaults, top_k=None, temperature=1.2, stop_strings="END", stop_token_ids=7)
    assert (built.top_k, built.temperature, built.stop_strings, built.stop_token_ids) == (20, 1.2, ("END",), (7,))
    with pytest.raises(GenerationError, match=r"^generation_config\.json: top_p must be in \(0, 1\], got 2$"):
        file_defaults({"top_p": 2})


# -- logits processors: transformers' semantics on fixed vectors ----------------------------------------------
PROBS = np.array([0.5, 0.3, 0.15, 0.05])
LOGITS = np.log(PROBS).astype(np.float32)


@pytest.mark.parametrize(
    ("p", "keep", "kept"),
    [
        (0.7, 1, [0, 1]),  # ascending cumulative 0.05, 0.2, 0.5, 1.0: <= 0.3 removed
        (0.9, 1, [0, 1, 2]),  # <= 0.1 removed
        (0.4, 1, [0]),  # <= 0.6 removed
        (0.4, 2, [0, 1]),  # ... but two kept
        (1.0, 1, [0, 1, 2, 3]),
    ],
)
def test_top_p_masks_as_transformers(p: float, keep: int, kept: list[int]) -> None:
    rows = np.stack([LOGITS, LOGITS[::-1]])  # the second row reversed: the mask must follow the tokens
    out = top_p(rows, p, keep)
    expected = np.where(np.isin(np.arange(4), kept), LOGITS, NEG)
    np.testing.assert_array_equal(out[0], expected)
    np.testing.assert_array_equal(out[1], expected[::-1])


def test_top_k_keeps_ties_and_minimum() -> None:
    scores = np.array([[1.0, 3.0, 2.0, 2.0, 0.5]], np.float32)
    np.testing.assert_array_equal(top_k(scores, 1), [[NEG, 3.0, NEG, NEG, NEG]])
    np.testing.assert_array_equal(top_k(scores, 2), [[NEG, 3.0, 2.0, 2.0, NEG]])  # ties with the 2nd stay
    np.testing.assert_array_equal(top_k(scores, 1, min_tokens_to_keep=3), [[NEG, 3.0, 2.0, 2.0, NEG]])
    np.testing.assert_array_equal(top_k(scores, 99), scores)


def test_repetition_penalty_and_temperature() -> None:
    scores = np.array([[2.0, -2.0, 1.0, -1.0], [2.0, -2.0, 1.0, -1.0]], np.float32)
    out = repetition_penalty(scores, [[0, 1, 1], [3]], 2.0)
    np.testing.assert_array_equal(out, [[1.0, -4.0, 1.0, -1.0], [2.0, -2.0, 1.0, -2.0]])
    np.testing.assert_array_equal(temperature(scores[:1], 0.5), [[4.0, -4.0, 2.0, -2.0]])


def test_processors_run_in_transformers_order() -> None:
    """Temperature 2 flattens (0.379, 0.294, 0.208, 0.120) before top-p 0.7 looks: only token 3 goes.
    top-p first would remove token 2 as well."""
    options = SearchOptions(do_sample=True, temperature=2.0, top_k=0, top_p=0.7, repetition_penalty=1.0)
    out = process(LOGITS[None, :], [[]], options)
    np.testing.assert_allclose(out[0], [LOGITS[0] / 2, LOGITS[1] / 2, LOGITS[2] / 2, NEG], rtol=1e-6)
    greedy = process(LOGITS[None, :], [[0]], SearchOptions(temperature=2.0, top_p=0.7, repetition_penalty=2.0))
    np.testing.assert_allclose(greedy[0], [LOGITS[0] * 2, *LOGITS[1:]], rtol=1e-6)  # warpers only when sampling


def test_sampling_follows_the_distribution_and_its_seed() -> None:
    """One row per generator: the picks follow softmax(logits); a row's seed repeats its pick."""
    logits = np.tile(np.array([np.log(0.5), np.log(0.3), np.log(0.2), -np.inf], np.float32), (20000, 1))
    options = SearchOptions(do_sample=True, top_k=0)

    def rows(seeds: range) -> list[RowState]:
        return [RowState(options, [], np.random.default_rng(seed)) for seed in seeds]

    picks = choose(logits, rows(range(20000)))
    assert 3 not in picks
    np.testing.assert_allclose(np.bincount(picks, minlength=4) / len(picks), [0.5, 0.3, 0.2, 0.0], atol=0.012)
    np.testing.assert_array_equal(choose(logits[:50], rows(range(7, 57))), picks[7:57])


# -- stop strings ---------------------------------------------------------------------------------------------
class Pieces:
    """A tokenizer whose tokens are the given strings, concatenated when decoded."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.decoded = 0

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        self.decoded += len(ids)
        return "".join(self.pieces[i] for i in ids)


@pytest.mark.parametrize(
    ("pieces", "stops"),
    [
        (["st", "op"], True),
        (["stop"], True),
        (["st", "opera"], True),
        (["sto", "pper"], True),
        (["las", "topper"], True),
        (["s", "to", "pped"], True),
        (["stop", "at"], False),  # complete before the last token: it stopped there already
        (["st", "op", "at"], False),
        (["st", "opera", "tion"], False),
        (["s", "t"], False),
    ],
)
def test_stop_strings_match_as_transformers(pieces: list[str], stops: bool) -> None:
    """transformers' StopStringCriteria examples (its docstring) for the stop string "stop"."""
    criteria = StopCriteria(stop_strings=["stop"], tokenizer=Pieces(pieces))
    assert (criteria.reason(list(range(len(pieces)))) == "stop_string") is stops


def test_stop_string_check_costs_a_window_not_the_text() -> None:
    pieces = Pieces(["a", "b", "c", "Z", "d", "e", "f", "g", "<s>", "</s>"])
    criteria = StopCriteria(eos_token_ids=[9], stop_token_ids=[9, 8], stop_strings=["cZ"], tokenizer=pieces)
    tokens = [0, 1] * 500
    assert criteria.reason(tokens) is None
    assert pieces.decoded <= 2 * criteria.window
    assert criteria.reason([*tokens, 2, 3]) == "stop_string"
    assert criteria.reason([0, 9]) == "eos" and criteria.reason([0, 8]) == "stop_token"
    hits = criteria.hits(np.array([[[0, 2, 3], [0, 1, 8], [0, 1, 2]]]))
    assert hits.tolist() == [[True, True, False]]


# -- the streamer -------------------------------------------------------------------------------------------
class Counting:
    """Wraps a tokenizer, counting the token ids it decodes."""

    def __init__(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer
        self.decoded = 0

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        self.decoded += len(ids)
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


@pytest.mark.parametrize("make", [byte_bpe, metaspace_bpe, word_tokenizer], ids=["byte-bpe", "metaspace", "words"])
def test_streamer_text_is_the_decoded_text_at_a_constant_cost(make: object) -> None:
    tokenizer = make()
    text = "\n".join(CORPUS * 4) if make is not word_tokenizer else " ".join(f"t{i % 256}" for i in range(400))
    ids = tokenizer.encode(text).ids
    counting = Counting(tokenizer)
    pieces: list[str] = []
    streamer = TextStreamer(counting, on_text=pieces.append)
    for token in ids:
        streamer(token)
    streamer.end()
    assert "".join(pieces) == tokenizer.decode(ids)
    assert not any("\ufffd" in p for p in pieces), "a partial character was emitted"
    # whole-text decoding would cost len(ids) ** 2 / 2 ids (~40,000 here); a window costs a few per token
    assert counting.decoded <= 12 * len(ids), (counting.decoded, len(ids))


def test_streamer_holds_back_a_split_character() -> None:
    tokenizer = byte_bpe()
    ids = tokenizer.encode("😀").ids
    assert len(ids) == 4  # no merge for it: four byte tokens
    decoder = IncrementalDecoder(tokenizer)
    assert [decoder.push(t) for t in ids] == ["", "", "", "😀"]
    decoder.push(ids[0])
    assert decoder.flush() == "\ufffd"  # an incomplete character at the end is shown as transformers shows it


# -- the tokenizer and its chat template ------------------------------------------------------------------------
def test_tokenizer_and_chat_template(tmp_path: Path) -> None:
    tokenizer = Tokenizer.from_dir(write_word_tokenizer(tmp_path))
    assert tokenizer.encode("t5 t7") == [5, 7] and tokenizer.decode([5, 7]) == "t5 t7"
    messages = [{"role": "system", "content": "t3"}, {"role": "user", "content": "t5 t6"}]
    assert tokenizer.apply_chat_template(messages) == "t12 t3 t10 t5 t6 t11"
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=False) == "t12 t3 t10 t5 t6 "
    assert tokenizer.special_tokens == {"eos_token": "t2"}


def test_chat_template_sources_and_errors(tmp_path: Path) -> None:
    folder = write_word_tokenizer(tmp_path, template=None)
    tokenizer = Tokenizer.from_dir(folder)
    with pytest.raises(GenerationError) as info:  # rendering a request: the file by its name in the folder
        tokenizer.apply_chat_template([{"role": "user", "content": "t1"}])
    assert str(info.value) == (
        "tokenizer_config.json: no chat_template (nor chat_template.jinja beside it): the model has no chat "
        "format to apply"
    )
    with pytest.raises(GenerationError) as info:  # checking the folder: the file by its path
        tokenizer.check_chat_template()
    assert str(info.value).startswith(f"{folder / 'tokenizer_config.json'}: no chat_template")
    (folder / "chat_template.jinja").write_text("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}")
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": {"content": "t1", "special": True}}))
    assert Tokenizer.from_dir(folder).apply_chat_template([{"role": "user", "content": " t4"}]) == "t1 t4"
    (folder / "chat_template.jinja").write_text("{{ raise_exception('no system role') }}")
    with pytest.raises(GenerationError, match=r"chat_template\.jinja: chat template failed: no system role$"):
        Tokenizer.from_dir(folder).apply_chat_template([])
    (folder / "chat_template.jinja").write_text("{% for %}")
    with pytest.raises(GenerationError, match=r"chat_template\.jinja: chat template does not parse: "):
        Tokenizer.from_dir(folder).check_chat_template()
    with pytest.raises(GenerationError, match=r"tokenizer\.json: no such file \(the model's tokenizer is needed"):
        Tokenizer.from_dir(tmp_path / "nowhere")


def test_chat_template_without_jinja2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    tokenizer = Tokenizer.from_dir(write_word_tokenizer(tmp_path))
    monkeypatch.setitem(sys.modules, "jinja2", None)
    expected = r"^a chat template needs the text extra \(jinja2 missing\): pip install 'ortstate\[text\]'"
    with pytest.raises(GenerationError, match=expected):
        tokenizer.apply_chat_template([])

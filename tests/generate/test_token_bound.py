"""generate/token_bound.py: the fewest tokens a text can make, known from its length, is never more
than the tokenizer makes (checked against real encodes of texts built to be hard: unknown
characters, long runs of spaces, combining marks and Hangul jamo that NFC composes, special tokens
written as text), and pipelines that can drop text or fuse it into one token have no bound."""

from __future__ import annotations

import json

import numpy as np
import pytest
from oracle import REPO

tokenizers = pytest.importorskip("tokenizers")
from text_tokenizers import CORPUS, byte_bpe, metaspace_bpe, word_tokenizer  # noqa: E402
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from ortstate.generate import Tokenizer  # noqa: E402
from ortstate.generate.token_bound import TokenBound  # noqa: E402

PIECES = [
    "the",
    " ",
    "    ",
    "quick",
    "ONNX",
    "\u00e9",
    "e\u0301",  # e and a combining acute: NFC makes one character of two
    "\u1100\u1161\u11a8",  # three jamo: NFC makes one syllable (9 bytes to 3)
    "\uff21",  # a fullwidth A
    "\u4f60\u597d",
    "\U0001f600",
    "\x00",
    "<eos>",  # special tokens written as text
    "<|assistant|>",
    "zzzz",
    "\n",
]


def texts(seed: int, count: int = 40) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(PIECES, size=int(rng.integers(1, 60)))) for _ in range(count)]


def trained(model: object, trainer: object, pre: object = None, normalizer: object = None) -> Tokenizer:
    backend = tokenizers.Tokenizer(model)
    if pre is not None:
        backend.pre_tokenizer = pre
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(CORPUS, trainer)
    return Tokenizer(backend)


def normalized(backend: tokenizers.Tokenizer, normalizer: object) -> Tokenizer:
    backend.normalizer = normalizer
    return Tokenizer(backend)


BOUNDED = {
    "llama (Metaspace, unknown characters one <unk> each)": lambda: Tokenizer.from_dir(REPO / "models/llm/llama"),
    "Metaspace": lambda: Tokenizer(metaspace_bpe()),
    "byte-level": lambda: Tokenizer(byte_bpe()),
    "byte-level, NFC": lambda: normalized(byte_bpe(), normalizers.NFC()),
    "byte-level, NFKC and lower case": lambda: normalized(
        byte_bpe(), normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    ),
}


@pytest.mark.parametrize("make", BOUNDED.values(), ids=BOUNDED.keys())
def test_the_fewest_tokens_is_never_more_than_encode_makes(make) -> None:
    tokenizer = make()
    bound = tokenizer.bound
    assert bound is not None
    for text in texts(0):
        made = len(tokenizer.encode(text, add_special_tokens=False))
        fewest = tokenizer.fewest_tokens(text, 0)
        assert 0 < fewest <= made, (text, fewest, made)
        assert tokenizer.fewest_tokens(text, fewest) == 0  # not more than that: nothing known
        assert tokenizer.fewest_tokens(text, fewest - 1) == fewest


def test_llamas_bound_is_its_longest_token() -> None:
    """``<|assistant|>`` is 13 bytes and one token: a text of them makes exactly the fewest."""
    tokenizer = Tokenizer.from_dir(REPO / "models/llm/llama")
    assert tokenizer.bound == TokenBound(max_bytes=13, normalizes=False)
    text = "<|assistant|>" * 100
    assert len(tokenizer.encode(text, add_special_tokens=False)) == tokenizer.fewest_tokens(text, 99) == 100


def test_a_normalizer_that_can_shrink_text_is_measured_after_it() -> None:
    """NFC writes three jamo (9 bytes) as one syllable (3 bytes): the raw length would claim more
    tokens than a tokenizer whose vocabulary holds the syllable makes."""
    jamo = "\u1100\u1161\u11a8"
    syllable = "\uac01"
    assert normalizers.NFC().normalize_str(jamo) == syllable
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=alphabet)
    backend = tokenizers.Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.normalizer = normalizers.NFC()
    backend.train_from_iterator([syllable * 8] * 20, trainer)
    tokenizer = Tokenizer(backend)
    bound = tokenizer.bound
    assert bound is not None and bound.normalizes
    text = jamo * 64
    made = len(tokenizer.encode(text, add_special_tokens=False))
    assert -(-len(text.encode()) // bound.max_bytes) > made  # what the raw length would have said
    assert tokenizer.fewest_tokens(text, 0) <= made


UNKNOWN, SPACES = "\u0436" * 1000, " " * 1000  # a letter none of these vocabularies has


def unbounded() -> dict[str, tuple[object, str]]:
    """Each pipeline, and a text of 1,000 characters it makes 2 tokens of at most."""
    bpe = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"])
    word_piece = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]"])
    unigram = trainers.UnigramTrainer(vocab_size=100, special_tokens=["[UNK]"], unk_token="[UNK]")
    return {
        "words, whitespace dropped": (lambda: Tokenizer(word_tokenizer()), SPACES),
        "WordPiece, a word one [UNK]": (
            lambda: trained(models.WordPiece(unk_token="[UNK]"), word_piece, pre_tokenizers.Whitespace()),
            UNKNOWN,
        ),
        "Unigram, unknowns fused": (lambda: trained(models.Unigram(), unigram), UNKNOWN),
        "whitespace dropped": (
            lambda: trained(models.BPE(unk_token="[UNK]"), bpe, pre_tokenizers.Whitespace()),
            SPACES,
        ),
        "BPE, unknowns fused": (
            lambda: trained(models.BPE(unk_token="[UNK]", fuse_unk=True), bpe, pre_tokenizers.Metaspace()),
            UNKNOWN,
        ),
        "BPE, unknowns dropped": (lambda: trained(models.BPE(), bpe, pre_tokenizers.Metaspace()), UNKNOWN),
    }


@pytest.mark.parametrize(("make", "witness"), unbounded().values(), ids=unbounded().keys())
def test_pipelines_that_can_drop_or_fuse_text_have_no_bound(make, witness: str) -> None:
    tokenizer = make()
    assert len(tokenizer.encode(witness, add_special_tokens=False)) <= 2  # no bound by length could hold
    assert tokenizer.bound is None
    assert tokenizer.fewest_tokens("x" * 100_000, 1) == 0


@pytest.mark.parametrize("change", ["lstrip", "truncation"])
def test_added_tokens_that_take_spaces_and_truncation_have_no_bound(tmp_path, change: str) -> None:
    spec = json.loads((REPO / "models/llm/llama/tokenizer.json").read_text())
    if change == "lstrip":
        spec["added_tokens"][-1]["lstrip"] = True
    else:
        spec["truncation"] = {"direction": "Right", "max_length": 16, "strategy": "LongestFirst", "stride": 0}
    tokenizer = Tokenizer(tokenizers.Tokenizer.from_str(json.dumps(spec)))
    assert tokenizer.bound is None

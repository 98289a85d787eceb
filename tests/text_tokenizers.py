"""Tokenizers made in the tests (nothing downloaded): a word-level one whose word ``tN`` is token N, and
byte-level / SentencePiece-style BPEs trained on a few lines holding multi-byte characters."""

from __future__ import annotations

import json
from pathlib import Path

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

# user turn, assistant turn: the template's markers are words of the word-level vocabulary
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ 't10' if m['role'] == 'user' else ('t12' if m['role'] == 'system' else 't11') }} "
    "{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}t11{% endif %}"
)

CORPUS = [
    "Grüße aus Zürich! Ça va? naïve café, déjà vu.",
    "你好，世界。今天天气很好。",
    "Emoji: 😀🎉🚀 and symbols ∑∫√ — done.",
    "The quick brown fox jumps over the lazy dog.\nA second line, with tabs\tand  spaces.",
]


def word_tokenizer(size: int = 256) -> tokenizers.Tokenizer:
    """Word ``tN`` is token N; decoding joins the words with spaces."""
    tok = tokenizers.Tokenizer(models.WordLevel({f"t{i}": i for i in range(size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def write_word_tokenizer(folder: Path, template: str | None = CHAT_TEMPLATE, **config: object) -> Path:
    """``tokenizer.json`` (+ ``tokenizer_config.json`` with ``template``) in ``folder``, in place of
    those there (links into a committed model folder are replaced, never written through)."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink(missing_ok=True)
    word_tokenizer().save(str(folder / "tokenizer.json"))
    if template is not None:
        config = {"chat_template": template, "eos_token": "t2", **config}
    if config:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def byte_bpe() -> tokenizers.Tokenizer:
    """GPT-2 style byte-level BPE: rare characters stay split over several byte tokens."""
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<eos>"]
    )
    tok.train_from_iterator(CORPUS[:1] + CORPUS[3:], trainer)  # no CJK or emoji merges: they stay bytes
    return tok


def metaspace_bpe() -> tokenizers.Tokenizer:
    """SentencePiece-style: words start with '▁', which decoding turns into a space, except the first."""
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<eos>"]))
    return tok

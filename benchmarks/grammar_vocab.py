"""A real-size byte-level BPE ``tokenizer.json`` made here (nothing downloaded): Qwen2's shape, 151,936
ids (151,933 merges over the 256 byte characters, and three special tokens), its pre-tokenizer's
split pattern and byte-level decoder, trained with the ``tokenizers`` package on text generated from
a fixed seed: pseudo-words of 1-4 syllables, numbers, punctuation runs, CJK characters, indentation
and JSON fragments. What a grammar engine's mask costs depends on how many tokens there are and how
their bytes share prefixes, not on what they mean. About 50 s and 1.5 GB on 2 cores; the file is
kept (``--vocab-cache``) and rebuilt only if missing.

    python -m benchmarks.grammar_vocab OUT.json
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path

VOCAB_SIZE = 151_936
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen2's pre-tokenizer split (tokenizer.json's Split pattern)
SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CONSONANTS = "b c d f g h j k l m n p r s t v w z br ch st tr sh th pl gr".split()
_VOWELS = "a e i o u y ai ea ou io".split()
SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS] + _VOWELS
_PUNCT = list(",.;:!?()[]{}\"'-_/\\=+*<>#@&%$`~|^")
_CJK = [chr(0x4E00 + i) for i in range(3000)]


def word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))


def _piece(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.72:
        w = word(rng)
        return w.capitalize() if rng.random() < 0.1 else w
    if r < 0.82:
        return str(rng.randint(0, 10 ** rng.randint(1, 6)))
    if r < 0.89:
        return "".join(rng.choice(_PUNCT) for _ in range(rng.randint(1, 3)))
    if r < 0.94:
        return "".join(rng.choice(_CJK) for _ in range(rng.randint(1, 3)))
    return f'{{"{word(rng)}": "{word(rng)}", "{word(rng)}": {rng.randint(0, 999)}}}'


def corpus(lines: int, seed: int = 0) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(lines):
        indent = " " * rng.choice((0, 0, 0, 2, 4, 8, 12, 16))
        text = indent + " ".join(_piece(rng) for _ in range(rng.randint(8, 30)))
        yield text + ("\n" if rng.random() < 0.3 else "")


def build(out: Path, lines: int = 150_000, vocab_size: int = VOCAB_SIZE) -> Path:
    """Train the tokenizer and save it to ``out``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(lines), trainer)
    if tok.get_vocab_size() != vocab_size:
        raise SystemExit(f"the generated text gave {tok.get_vocab_size()} tokens, not {vocab_size}: more --lines")
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    return out


def cached(folder: Path) -> Path:
    """The tokenizer under ``folder``, built there first if it is not."""
    path = folder / f"qwen-like-{VOCAB_SIZE}.json"
    if not path.is_file():
        print(f"building a {VOCAB_SIZE}-token byte-level BPE into {path} (~1 min)", file=sys.stderr, flush=True)
        build(path)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__)
        raise SystemExit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)
    print(build(Path(sys.argv[1])))

"""Write a ``tokenizer.json`` and ``tokenizer_config.json`` (with a chat template) into every decoder-only
folder under ``models/llm/``, made here with no download: a BPE trained with the ``tokenizers`` package
on the repository's own prose (``README.md`` and ``docs/*.md``) at exactly the model's vocabulary size.

The models' weights are random, so what the tokens mean does not matter; what matters is that text
generation, stop strings, chat templates and ``ortstate serve``'s OpenAI API run on the committed
models, and that the special tokens sit at the ids ``generation_config.json`` / ``config.json`` give:
the pad, bos and eos tokens are trained first, in the order of their ids, so they get those ids.

SentencePiece style (``▁`` for a space, as Llama's tokenizers): characters beyond the
``limit_alphabet`` most frequent ones in the corpus become ``<unk>``. The tokenizer adds the bos
token in front of a text when asked for special tokens (as Llama's does); the chat template
(Zephyr's: ``<|user|>``, ``<|assistant|>``, ``<|system|>``, each turn ending with the eos token)
writes the bos token itself.

Usage (the ``text`` extra: tokenizers, and ortstate for the folders' layout)::

    .venv/bin/python models/make_tokenizers.py          # every decoder-only folder
    .venv/bin/python models/make_tokenizers.py llama    # some of them

Deterministic for a given corpus: rerunning after the docs changed gives another vocabulary (the
tests compare the server with ``Generator`` on the same files, never with fixed text).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parents[1]
LLM = ROOT / "models" / "llm"
sys.path.insert(0, str(ROOT))

from ortstate.decoders import find_model_files  # noqa: E402

# the special tokens a config names, by the config's key
ROLE_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>"}
UNK = "<unk>"
CHAT_MARKERS = ["<|system|>", "<|user|>", "<|assistant|>"]
LIMIT_ALPHABET = 100
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('roles are system, user and assistant, got ' + message['role']) }}"
    "{% endif %}"
    "{% if loop.first %}{{ bos_token }}{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def corpus() -> list[str]:
    """The repository's prose: what the BPE learns its merges from."""
    return [p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]


def config_ids(folder: Path) -> dict[str, int]:
    """``pad_token``/``bos_token``/``eos_token`` -> id, as transformers reads them: generation_config.json
    first, then config.json, then its ``text_config`` (the first eos id of a list)."""
    files = [folder / "generation_config.json", folder / "config.json"]
    sources = [json.loads(f.read_text()) for f in files if f.is_file()]
    sources += [s["text_config"] for s in sources if isinstance(s.get("text_config"), dict)]
    ids = {}
    for role in ROLE_TOKENS:
        found = next((s[f"{role}_id"] for s in sources if s.get(f"{role}_id") is not None), None)
        if isinstance(found, list):
            found = found[0] if found else None
        if found is not None:
            ids[role] = int(found)
    return ids


def special_tokens(ids: dict[str, int], folder: Path) -> list[str]:
    """The special tokens in the order that gives each its config id (the trainer puts them first):
    the config's at their ids, ``<unk>`` and the chat markers in the gaps and after.

    Raises:
        SystemExit: the config's ids leave more gaps than there are other special tokens.
    """
    at = {i: ROLE_TOKENS[role] for role, i in ids.items()}
    others = [UNK, *CHAT_MARKERS]
    if len(at) != len(ids) or max(at, default=-1) >= len(at) + len(others):
        raise SystemExit(f"{folder}: special token ids {ids} cannot all be placed first: place them by hand")
    ordered = [at[i] if i in at else others.pop(0) for i in range(max(at, default=-1) + 1)]
    return ordered + others


def train(vocab_size: int, specials: list[str], bos: str | None) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, limit_alphabet=LIMIT_ALPHABET, show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer)
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    if tok.get_vocab_size() != vocab_size:
        raise SystemExit(f"the corpus gave {tok.get_vocab_size()} tokens, not {vocab_size}")
    return tok


def write(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    vocab_size = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    ids = config_ids(folder)
    specials = special_tokens(ids, folder)
    roles = {role: ROLE_TOKENS[role] for role in ids}
    tok = train(int(vocab_size), specials, roles.get("bos_token"))
    for role, i in ids.items():
        if tok.token_to_id(roles[role]) != i:
            raise SystemExit(f"{folder}: {roles[role]} got id {tok.token_to_id(roles[role])}, the config says {i}")
    tok.save(str(folder / "tokenizer.json"))
    settings = {**roles, "unk_token": UNK, "chat_template": CHAT_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast"}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=1) + "\n", encoding="utf-8")
    print(f"{folder.relative_to(ROOT)}: {tok.get_vocab_size()} tokens, specials {specials}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="folders under models/llm (default: every decoder-only one)")
    args = parser.parse_args(argv)
    folders = [LLM / n for n in args.names] or sorted(p for p in LLM.iterdir() if (p / "config.json").is_file())
    for folder in folders:
        files = find_model_files(folder)
        if files.encoder is None:  # encoder-decoders (Whisper, T5) take no text prompt here
            write(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())

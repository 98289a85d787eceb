"""The tokenizer an export writes for onnxruntime-genai encodes as ortstate's (``tokenizers`` on
the model folder's ``tokenizer.json``), or is left out with a notice saying how genai differs.

- Every ``models/llm`` folder export takes has a SentencePiece-style BPE (``Metaspace``, ``<unk>``,
  no byte fallback) that genai's tokenizer (onnxruntime-extensions') reads otherwise: the genai
  export leaves it out, and the notice's claim is genai's real output; the optimum export copies it.
- Byte-level BPE tokenizers (GPT-2 / Qwen2 style), with or without a bos token added by the
  post-processor, with a ``tokenizer_config.json`` naming no ``tokenizer_class`` or none at all:
  written (the export's ``tokenizer_config.json`` given one) and genai encodes and decodes a corpus
  as ortstate does, with and without special tokens.
- A class genai does not know is left out, naming genai's refusal; without onnxruntime-genai the
  files are written with a notice that nothing was checked.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import onnxruntime_genai as og
import pytest
import tokenizers
from oracle import linked_copy
from ov_search import LLM
from test_export import EXPORTED
from text_tokenizers import CORPUS, byte_bpe
from tokenizers import processors

import ortstate
from ortstate.export import ExportNotice
from ortstate.export.tokenizer_files import TEXTS
from ortstate.generate import Tokenizer

pytestmark = pytest.mark.filterwarnings("ignore::ortstate.export.ExportNotice")
TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json"}
LEFT_OUT = "the tokenizer is left out of the export: onnxruntime-genai's tokenizer encodes "


def _texts(tokenizer: Tokenizer) -> list[str]:
    """What the tests encode: the export's corpus, other text, and each added token inside text."""
    added = [t.content for t in tokenizer.backend.get_added_tokens_decoder().values()]
    return [*TEXTS, *CORPUS, "<s>", "</s>x", *(f"a{t}b {t}" for t in added)]


def _shown(ids: list[int]) -> str:
    """Ids as a notice shows them: the first 12, then "..." when there are more."""
    return "[" + ", ".join(map(str, ids[:12])) + (", ...]" if len(ids) > 12 else "]")


def _genai_tokenizer(folder: Path, special: bool) -> og.Tokenizer:
    tok = og.Tokenizer(og.Model(str(folder)))
    tok.update_options(add_special_tokens=str(special).lower())
    return tok


@pytest.mark.parametrize("family", EXPORTED)
def test_a_tokenizer_genai_misreads_is_left_out(family: str, tmp_path: Path) -> None:
    source = LLM / family
    with pytest.warns(ExportNotice) as caught:
        done = ortstate.export(source, tmp_path / "genai")
    assert TOKENIZER_FILES.isdisjoint(done.files) and not (tmp_path / "genai" / "tokenizer.json").exists()
    (notice,) = done.notices
    assert [str(w.message) for w in caught] == [notice] and "\n" not in notice
    ours = Tokenizer.from_dir(source).encode("Once upon a time", add_special_tokens=False)
    # the claim is genai's real output: its tokenizer on the folder's files, beside the export
    beside = linked_copy(source, tmp_path / "files", skip=("genai_config.json",))
    (beside / "genai_config.json").symlink_to(tmp_path / "genai" / "genai_config.json")
    theirs = [int(t) for t in og.Tokenizer(og.Config(str(beside))).encode("Once upon a time")]
    assert theirs != ours
    assert notice == (
        f"{source}: {LEFT_OUT}'Once upon a time' (without special tokens) as {_shown(theirs)} "
        f"where tokenizer.json gives {_shown(ours)}; give genai token ids made with the model "
        "folder's tokenizer.json (ortstate.generate.Tokenizer, tokenizers, transformers)"
    )
    with pytest.raises(RuntimeError, match="tokenizer_config.json"):
        og.Tokenizer(og.Model(str(tmp_path / "genai")))  # no tokenizer rather than a wrong one
    kept = ortstate.export(source, tmp_path / "optimum", layout="optimum")  # transformers reads them as ortstate
    assert kept.notices == () and TOKENIZER_FILES <= set(kept.files)
    for name in TOKENIZER_FILES:
        assert (tmp_path / "optimum" / name).read_bytes() == (source / name).read_bytes()


def _with_bos(tok: tokenizers.Tokenizer) -> tokenizers.Tokenizer:
    tok.add_special_tokens(["<s>"])
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    return tok


# name: (the tokenizer, tokenizer_config.json or None for none)
READ: dict[str, tuple[Callable[[], tokenizers.Tokenizer], dict | None]] = {
    "byte_level": (byte_bpe, {"eos_token": "<eos>", "tokenizer_class": "GPT2TokenizerFast"}),
    "byte_level_bos": (lambda: _with_bos(byte_bpe()), {"bos_token": "<s>", "eos_token": "<eos>"}),
    "no_class": (byte_bpe, {"eos_token": "<eos>"}),  # genai: a fairseq tokenizer, <s> ... </s> around text
    "no_config": (byte_bpe, None),  # genai: refused
}


@pytest.mark.parametrize("kind", sorted(READ))
def test_a_tokenizer_genai_reads_encodes_as_ortstates(kind: str, tmp_path: Path) -> None:
    make, config = READ[kind]
    source = linked_copy(LLM / "llama", tmp_path / "src", skip=tuple(TOKENIZER_FILES))
    make().save(str(source / "tokenizer.json"))
    if config is not None:
        (source / "tokenizer_config.json").write_text(json.dumps(config))
    before = {p.name: p.read_bytes() for p in source.glob("tokenizer*.json")}
    done = ortstate.export(source, tmp_path / "out")
    assert done.notices == () and TOKENIZER_FILES <= set(done.files)
    assert {p.name: p.read_bytes() for p in source.glob("tokenizer*.json")} == before  # the folder unchanged
    written = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    given = config or {}
    assert written == {**given, "tokenizer_class": given.get("tokenizer_class", "PreTrainedTokenizerFast")}
    ours = Tokenizer.from_dir(source)
    texts = _texts(ours)
    for special in (False, True):
        theirs = _genai_tokenizer(tmp_path / "out", special)
        for text in texts:
            want = ours.encode(text, add_special_tokens=special)
            assert [int(t) for t in theirs.encode(text)] == want, (special, text)
    special_ids = {i for i, t in ours.backend.get_added_tokens_decoder().items() if t.special}
    for text in texts:
        ids = ours.encode(text, add_special_tokens=False)
        if ids and set(ids) <= special_ids:  # genai decodes those as '\ufffd', whatever the tokenizer
            assert theirs.decode(ids) == "\ufffd" and ours.decode(ids) == "", text
            continue
        assert theirs.decode(ids) == ours.decode(ids), text


def test_a_class_genai_refuses_is_left_out_saying_so(tmp_path: Path) -> None:
    source = linked_copy(LLM / "llama", tmp_path / "src", skip=tuple(TOKENIZER_FILES))
    byte_bpe().save(str(source / "tokenizer.json"))
    (source / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "OwnTokenizer"}))
    done = ortstate.export(source, tmp_path / "out")
    assert TOKENIZER_FILES.isdisjoint(done.files)
    assert done.notices == (
        f"{source}: the tokenizer is left out of the export: onnxruntime-genai cannot load it (Unsupported "
        "tokenizer class: OwnTokenizer); give genai token ids made with the model folder's tokenizer.json "
        "(ortstate.generate.Tokenizer, tokenizers, transformers)",
    )


def test_without_genai_the_files_are_written_unchecked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime_genai", None)  # as if not installed
    source = LLM / "llama"
    done = ortstate.export(source, tmp_path / "out")
    assert TOKENIZER_FILES <= set(done.files)
    assert done.notices == (
        f"{source}: the tokenizer files are written unchecked: onnxruntime_genai not installed, so whether "
        "onnxruntime-genai's tokenizer encodes as tokenizer.json does was not checked (pip install "
        "'ortstate[genai]' ('.[genai]' in a checkout), and export again to check)",
    )


def test_a_tokenizer_config_that_is_no_json_object_is_named(tmp_path: Path) -> None:
    source = linked_copy(LLM / "llama", tmp_path / "src", skip=("tokenizer_config.json",))
    (source / "tokenizer_config.json").write_text("[1, 2]")
    message = f"{source / 'tokenizer_config.json'}: expected a JSON object"
    with pytest.raises(ortstate.ExportError, match=f"^{re.escape(message)}$"):
        ortstate.export(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()

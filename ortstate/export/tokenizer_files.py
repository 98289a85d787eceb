"""The tokenizer files an export writes, and the check that onnxruntime-genai encodes as they do.

The optimum layout copies the model folder's tokenizer files as they are: transformers reads them
through the ``tokenizers`` package, as ortstate does. onnxruntime-genai reads ``tokenizer.json``
and ``tokenizer_config.json`` with a tokenizer of its own (onnxruntime-extensions'), by rules of
its own, so the genai layout writes what genai needs and checks what genai does with it:

- ``tokenizer_config.json`` must exist and name a ``tokenizer_class`` (genai refuses a folder
  without the file; without the class it takes the tokenizer for a legacy fairseq one and puts
  ``<s>`` and ``</s>`` around every text it encodes with special tokens): the export writes
  transformers' class for a bare ``tokenizer.json``, ``PreTrainedTokenizerFast``, where the
  folder names none. The model folder is never changed.
- At export time, genai's tokenizer encodes :data:`TEXTS` and every added token of the tokenizer
  (inside a text), with and without special tokens, and decodes their ids; each must give what
  ``tokenizers`` gives for the model folder's ``tokenizer.json`` (ortstate's and transformers'
  tokenizer). genai reads byte-level BPE tokenizers (GPT-2, Qwen2, Llama 3 style) as they are; a
  SentencePiece-style (``Metaspace``) BPE trained by ``tokenizers`` it does not (characters outside
  the vocabulary become -1 where tokenizers gives ``<unk>``; a text starting with a space gets a
  second ``▁``). A tokenizer that differs is left out of the export, with a notice naming the
  first text that differs: never written wrong.
- Without onnxruntime-genai or ``tokenizers`` installed nothing can be checked: the files are
  written, with a notice saying they were not checked.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..decoders import read_json_object
from ..errors import ExportError
from ..extras import install_hint, missing_modules
from .configs import GENAI_CONFIG, TOKENIZER_FILES

__all__ = ["GENERIC_CLASS", "TEXTS", "TokenizerFiles", "tokenizer_files"]

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# transformers' class for a tokenizer.json as it is; genai reads it as a BPE of no particular family
GENERIC_CLASS = "PreTrainedTokenizerFast"
# What the check encodes (besides each added token inside a text): the cases where genai's rules
# and tokenizers' part, each read in onnxruntime-extensions' source (spaces at either end and
# doubled, control characters, text outside a small vocabulary, the SentencePiece space mark).
TEXTS = (
    "",
    "Once upon a time",
    " a leading space",
    "a trailing space ",
    "two  spaces",
    "tab\tand\r\nnewlines\n\n",
    "\n",
    "Grüße aus Zürich: naïve café, déjà vu.",
    "你好，世界。",
    "emoji 😀🎉🚀 and ∑∫√ — done",
    "3.14159, 1,000 and 42%",
    "a ▁ mark",
    "MixedCase snake_case kebab-case",
)
_SHOWN_IDS = 12  # ids a notice shows of each encoding


@dataclass(frozen=True)
class TokenizerFiles:
    """What an export writes of the tokenizer.

    Attributes:
        files: file name -> content (empty: the export has no tokenizer).
        notices: what a user should know, one line each.
    """

    files: dict[str, bytes]
    notices: tuple[str, ...]


def tokenizer_files(source: Path, genai_settings: Mapping[str, Any] | None) -> TokenizerFiles:
    """The tokenizer files of ``source`` for an export: as they are (``genai_settings`` None: the
    optimum layout), or as genai reads them, checked with genai's tokenizer under ``genai_settings``
    (the export's ``genai_config.json``).

    Raises:
        ExportError: a tokenizer file cannot be read, or ``tokenizer_config.json`` is no JSON object.
    """
    files = {name: _read(source / name) for name in TOKENIZER_FILES if (source / name).is_file()}
    if not files:
        notice = (
            f"{source} has no tokenizer files ({TOKENIZER_JSON} ...): the export generates from token ids only; "
            "copy them into the output folder for text"
        )
        return TokenizerFiles({}, (notice,))
    if genai_settings is None:
        return TokenizerFiles(files, ())
    files = _for_genai(source, files)
    problem = _genai_problem(source, files, genai_settings)
    if problem is None:
        return TokenizerFiles(files, ())
    if isinstance(problem, _NotChecked):
        return TokenizerFiles(files, (f"{source}: the tokenizer files are written unchecked: {problem.why}",))
    notice = (
        f"{source}: the tokenizer is left out of the export: {problem}; give genai token ids made with the "
        f"model folder's {TOKENIZER_JSON} (ortstate.generate.Tokenizer, tokenizers, transformers)"
    )
    return TokenizerFiles({}, (notice,))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ExportError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _for_genai(source: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` with a ``tokenizer_config.json`` naming a ``tokenizer_class`` (see the module's doc)."""
    if TOKENIZER_JSON not in files:
        return files
    config = read_json_object(source / TOKENIZER_CONFIG, ExportError)
    if isinstance(config.get("tokenizer_class"), str) and config["tokenizer_class"]:
        return files
    config["tokenizer_class"] = GENERIC_CLASS
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    return {**files, TOKENIZER_CONFIG: text.encode("utf-8")}


@dataclass(frozen=True)
class _NotChecked:
    why: str


def _genai_problem(source: Path, files: dict[str, bytes], settings: Mapping[str, Any]) -> str | _NotChecked | None:
    """How genai's tokenizer differs from tokenizers' on ``files`` (None: it does not), or why that
    could not be checked."""
    if TOKENIZER_JSON not in files:
        return _NotChecked(
            f"onnxruntime-genai reads {TOKENIZER_JSON}, which {source} lacks (its Tokenizer fails to load)"
        )
    missing = missing_modules("genai")
    if missing:
        return _NotChecked(
            f"{', '.join(missing)} not installed, so whether onnxruntime-genai's tokenizer encodes as {TOKENIZER_JSON} "
            f"does was not checked ({install_hint('genai')}, and export again to check)"
        )
    import onnxruntime_genai as og
    import tokenizers

    try:
        want = tokenizers.Tokenizer.from_str(files[TOKENIZER_JSON].decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises its own exception types
        return f"tokenizers cannot read {TOKENIZER_JSON} ({' '.join(str(exc).split())})"
    try:
        with tempfile.TemporaryDirectory(prefix="ortstate-tokenizer-") as folder:
            root = Path(folder)
            (root / GENAI_CONFIG).write_text(json.dumps(settings), encoding="utf-8")
            for name, data in files.items():
                (root / name).write_bytes(data)
            try:
                got = og.Tokenizer(og.Config(folder))
            except Exception as exc:  # noqa: BLE001 - genai raises RuntimeError for any refusal
                said = " ".join(str(exc).replace(folder, str(source)).split())  # the files are the folder's
                return f"onnxruntime-genai cannot load it ({said})"
            return _first_difference(got, want)
    except OSError as exc:
        return _NotChecked(f"the check's temporary folder cannot be written ({exc.strerror or exc})")


def _first_difference(got: Any, want: Any) -> str | None:
    """The first text of the check genai's tokenizer (``got``) encodes or decodes otherwise than
    tokenizers' (``want``), said in a clause, or None."""
    added = [t.content for t in want.get_added_tokens_decoder().values()]
    texts = [*TEXTS, *(f"x{token} y\n{token}" for token in added)]
    for special in (False, True):
        got.update_options(add_special_tokens=str(special).lower())
        for text in texts:
            ids, expected = _ids(got.encode(text)), want.encode(text, add_special_tokens=special).ids
            if ids != expected:
                how = "with" if special else "without"
                return (
                    f"onnxruntime-genai's tokenizer encodes {text!r} ({how} special tokens) as {_shown(ids)} "
                    f"where {TOKENIZER_JSON} gives {_shown(expected)}"
                )
    for text in texts:
        ids = want.encode(text, add_special_tokens=False).ids
        try:
            decoded = str(got.decode(ids))
        except Exception as exc:  # noqa: BLE001 - genai raises RuntimeError (or worse) for ids it cannot map
            decoded = f"an error ({' '.join(str(exc).split())})"
        expected = want.decode(ids, skip_special_tokens=True)
        if decoded != expected:
            return (
                f"onnxruntime-genai's tokenizer decodes {_shown(ids)} as {decoded!r} where {TOKENIZER_JSON} "
                f"gives {expected!r}"
            )
    return None


def _ids(values: Any) -> list[int]:
    return [int(v) for v in values]


def _shown(ids: list[int]) -> str:
    head = ", ".join(map(str, ids[:_SHOWN_IDS]))
    return f"[{head}, ...]" if len(ids) > _SHOWN_IDS else f"[{head}]"

"""How few tokens a text can make, known from its length alone: a prompt that cannot fit a context
is refused without tokenizing it (a megabyte takes the ``tokenizers`` package about a second).

The rule: if no token of a tokenizer ever stands for more than B bytes of the text it encodes,
a text of N bytes makes at least ceil(N / B) tokens. B is read from ``tokenizer.json`` once: the
longest vocabulary entry in bytes of the text it covers, the longest added token's content, and 4
(one character) where an unknown character becomes the unknown token or its bytes. It holds, and
:func:`max_token_bytes` gives B, only for a pipeline that keeps every byte of the text in some
token of the vocabulary:

- the model is BPE (a token is the concatenation of the characters it merged): unknown
  characters become ``byte_fallback`` tokens, or one ``unk_token`` each (not fused into one), or
  cannot occur (a byte-level vocabulary holding all 256 byte characters);
- the pre-tokenizer drops nothing: ByteLevel (each byte one character of the vocabulary's
  alphabet, so an entry covers one byte per character), Metaspace (a space becomes ``▁``, 3 bytes
  for 1), Split and Punctuation unless they remove what they split on, Digits, UnicodeScripts, or a
  sequence of those;
- no added token strips the spaces beside it, and nothing truncates.

Anything else (WordPiece and Unigram, whose unknown token can stand for a whole word; a
pre-tokenizer that drops whitespace) has no bound: its prompts are tokenized whole. A normalizer
may shrink text (NFC composes three Hangul jamo into one syllable): N is then measured on the
normalized text (:attr:`TokenBound.normalizes`), except for normalizers that only add bytes
(Prepend, a Replace whose text is no shorter than what it replaces).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TokenBound", "token_bound"]

_KEEPING = {"ByteLevel", "Metaspace", "Split", "Punctuation", "Digits", "UnicodeScripts"}
_UNKNOWN_BYTES = 4  # one character, where an unknown one becomes the unknown token or its bytes


@dataclass(frozen=True)
class TokenBound:
    """B of the module's rule, and whether the text must be normalized before it is measured."""

    max_bytes: int
    normalizes: bool


def token_bound(spec: Mapping[str, Any], byte_alphabet: frozenset[str]) -> TokenBound | None:
    """The rule's B for a parsed ``tokenizer.json`` (``byte_alphabet``: ByteLevel's 256 characters),
    or None where no bound holds (see the module)."""
    model = spec.get("model") or {}
    pre = _steps(spec.get("pre_tokenizer"))
    if model.get("type") != "BPE" or spec.get("truncation") or pre is None:
        return None
    added = spec.get("added_tokens") or []
    if any(a.get("lstrip") or a.get("rstrip") for a in added):
        return None
    vocab = model.get("vocab") or {}
    byte_level = any(p.get("type") == "ByteLevel" for p in pre)
    if model.get("byte_fallback") or (model.get("unk_token") is not None and not model.get("fuse_unk")):
        longest = _UNKNOWN_BYTES
    elif byte_level and byte_alphabet <= vocab.keys():
        longest = 1
    else:  # an unknown character would be dropped, or fused with the next into one token
        return None
    for entry in vocab:
        longest = max(longest, len(entry) if byte_level else len(entry.encode("utf-8")))
    for token in added:
        longest = max(longest, len(str(token.get("content", "")).encode("utf-8")))
    return TokenBound(longest, not _only_adds(spec.get("normalizer")))


def _steps(pre: Any) -> list[Mapping[str, Any]] | None:
    """The pre-tokenizer's steps, or None if one may drop text."""
    if pre is None:
        return []
    if pre.get("type") == "Sequence":
        steps: list[Mapping[str, Any]] = []
        for inner in pre.get("pretokenizers") or []:
            found = _steps(inner)
            if found is None:
                return None
            steps += found
        return steps
    if pre.get("type") not in _KEEPING or pre.get("behavior") == "Removed":
        return None
    return [pre]


def _only_adds(normalizer: Any) -> bool:
    """Whether a normalizer can only make text longer (then the raw text's length bounds it)."""
    if normalizer is None:
        return True
    kind = normalizer.get("type")
    if kind == "Sequence":
        return all(_only_adds(n) for n in normalizer.get("normalizers") or [])
    if kind == "Prepend":
        return True
    if kind == "Replace":
        pattern = normalizer.get("pattern") or {}
        return "String" in pattern and len(normalizer.get("content", "").encode()) >= len(pattern["String"].encode())
    return False

"""The bytes each token id writes, read from ``tokenizer.json``: what a grammar engine matches token
by token against a grammar (which ids may follow a text is a question about bytes, not ids).

A token's bytes are its vocabulary entry undone by the tokenizer's decoder, token by token:

- ``ByteLevel`` (GPT-2, Qwen2, Llama 3): each character of the entry stands for one byte (GPT-2's
  printable alphabet for the 256 bytes);
- ``Metaspace`` (``replacement``, e.g. ``▁``, is a space), ``Replace`` (a string pattern replaced),
  ``ByteFallback`` (an entry ``<0xNN>`` is the byte NN), ``Fuse`` and ``Strip`` (they join or trim
  the whole text, not a token's bytes), ``BPEDecoder`` (its ``suffix`` ends a word: a space), in a
  ``Sequence`` of those;
- no decoder: the entry's UTF-8.

Special added tokens (``"special": true``) and ids past the vocabulary up to the model's logits
width write nothing a grammar can use: they are never allowed inside an answer. Other decoders
(WordPiece, CTC) and tokenizer models without a vocabulary to read are refused, naming them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import GenerationError

__all__ = ["TokenBytes", "token_bytes"]

_PASSIVE = {"Fuse", "Strip"}  # they act on the whole decoded text: a token's bytes stay as they are
_SUPPORTED = "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder"


@dataclass(frozen=True)
class TokenBytes:
    """Every id's bytes: ``tokens[i]`` for id ``i`` (``b""`` for a special or unused id)."""

    tokens: tuple[bytes, ...]
    special: frozenset[int]

    @functools.cached_property
    def _by_bytes(self) -> tuple[dict[bytes, int], int]:
        table: dict[bytes, int] = {}
        for i, b in enumerate(self.tokens):
            if b and i not in self.special:
                table.setdefault(b, i)
        return table, max(map(len, table), default=1)

    def spell(self, data: bytes) -> list[int]:
        """Ids whose bytes spell ``data``, longest tokens first (bytes no token writes are skipped).

        For text the tokenizer's own ids do not spell (a Metaspace tokenizer adds a ``▁`` in front);
        linear in ``len(data)`` times the longest token.
        """
        table, longest = self._by_bytes
        ids, at = [], 0
        while at < len(data):
            for size in range(min(longest, len(data) - at), 0, -1):
                found = table.get(data[at : at + size])
                if found is not None:
                    ids.append(found)
                    at += size
                    break
            else:
                at += 1
        return ids


def _byte_level_map() -> dict[str, int]:
    """GPT-2's character -> byte table (``bytes_to_unicode`` inverted)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


_BYTE_LEVEL = _byte_level_map()


def _steps(decoder: Any, source: str) -> list[Mapping[str, Any]]:
    """The decoder as a flat list of steps (a ``Sequence`` unrolled); refuses what is not understood."""
    if decoder is None:
        return []
    if not isinstance(decoder, Mapping):
        raise GenerationError(f"{source}: its decoder is not a JSON object", field="json_schema")
    kind = decoder.get("type")
    if kind == "Sequence":
        return [step for d in decoder.get("decoders") or [] for step in _steps(d, source)]
    if kind in ("ByteLevel", "Metaspace", "Replace", "ByteFallback", "BPEDecoder") or kind in _PASSIVE:
        return [decoder]
    raise GenerationError(
        f"{source}: json_schema cannot read the token bytes of a {kind} decoder (supported: {_SUPPORTED})",
        field="json_schema",
    )


def _replace(step: Mapping[str, Any], source: str) -> tuple[str, str]:
    pattern = step.get("pattern")
    if not isinstance(pattern, Mapping) or not isinstance(pattern.get("String"), str):
        raise GenerationError(
            f"{source}: json_schema reads Replace decoders of a string pattern only", field="json_schema"
        )
    return pattern["String"], str(step.get("content", ""))


def _entry_bytes(entry: str, steps: Sequence[Mapping[str, Any]], source: str) -> bytes:
    """One vocabulary entry's bytes through the decoder's steps."""
    text: str | bytes = entry
    for step in steps:
        kind = step["type"]
        if isinstance(text, bytes) or kind in _PASSIVE:
            continue  # already bytes (a byte-level or byte-fallback entry): later steps join text
        if kind == "ByteLevel":
            if all(c in _BYTE_LEVEL for c in text):
                text = bytes(_BYTE_LEVEL[c] for c in text)
        elif kind == "Metaspace":
            text = text.replace(str(step.get("replacement", "\u2581")), " ")
        elif kind == "Replace":
            old, new = _replace(step, source)
            text = text.replace(old, new)
        elif kind == "ByteFallback":
            if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                try:
                    text = bytes([int(text[3:5], 16)])
                except ValueError:
                    pass
        elif kind == "BPEDecoder":
            suffix = str(step.get("suffix", "</w>"))
            text = text.replace(suffix, " ")
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _vocabulary(model: Any, source: str) -> dict[int, str]:
    """id -> vocabulary entry of the tokenizer's model (BPE / WordLevel: a map; Unigram: a list)."""
    vocab = model.get("vocab") if isinstance(model, Mapping) else None
    if isinstance(vocab, Mapping):
        return {int(i): str(t) for t, i in vocab.items()}
    if isinstance(vocab, list):
        return {i: str(e[0]) for i, e in enumerate(vocab) if isinstance(e, list) and e}
    kind = model.get("type") if isinstance(model, Mapping) else None
    raise GenerationError(f"{source}: json_schema cannot read the vocabulary of a {kind} model", field="json_schema")


def token_bytes(
    tokenizer_json: Mapping[str, Any], width: int | None = None, source: str = "tokenizer.json"
) -> TokenBytes:
    """Each token id's bytes (see the module docstring), for ``width`` ids (the model's logits; default
    the tokenizer's size).

    Raises:
        GenerationError: a decoder or model it cannot read, or a vocabulary wider than ``width``.
    """
    steps = _steps(tokenizer_json.get("decoder"), source)
    entries = _vocabulary(tokenizer_json.get("model"), source)
    added: set[int] = set()  # their content is the text itself: no decoder step applies
    special: set[int] = set()
    for token in tokenizer_json.get("added_tokens") or []:
        if isinstance(token, Mapping) and isinstance(token.get("id"), int):
            entries[token["id"]] = str(token.get("content", ""))
            (special if token.get("special", True) else added).add(token["id"])
    size = max(entries, default=-1) + 1
    width = size if width is None else width
    if size > width:
        raise GenerationError(
            f"{source}: the tokenizer has ids up to {size - 1}, the model's logits only {width}", field="json_schema"
        )
    out = [b""] * width
    for i, entry in entries.items():
        if i not in special:
            out[i] = entry.encode("utf-8") if i in added else _entry_bytes(entry, steps, source)
    return TokenBytes(tuple(out), frozenset(i for i in range(width) if not out[i]))

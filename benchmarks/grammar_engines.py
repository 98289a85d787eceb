"""The three grammar engines behind one small surface, for ``python -m benchmarks grammar-masks``:
compile a JSON schema for a vocabulary, make matchers, fill a batch's bitmask (one int32 word per 32
ids, bit set = allowed), advance by tokens. Each is fed the same token bytes (ortstate's
:func:`~ortstate.generate.structured.token_bytes`), an end token past the vocabulary, and compact JSON
(``", "`` / ``": "`` separators, no other whitespace), so the three constrain the same language.

- ``llguidance``: ``LLMatcher`` per row, ``LLExecutor`` fills the batch in its thread pool;
- ``xgrammar``: ``GrammarCompiler`` (cache off, so compiling is timed), ``BatchGrammarMatcher``;
  its import needs torch and transformers (a benchmark venv may have them; ortstate does not);
- ``outlines-core``: the schema as a regular expression (``build_regex_from_schema``), an ``Index``
  over the whole vocabulary, a ``Guide`` per row, filled one row at a time (no batch call). A regular
  expression cannot nest without bound: any-JSON (``{"type": "object"}``) is not offered.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import numpy as np

from ortstate.generate.structured import TokenBytes

__all__ = ["ENGINES", "available", "make_engine"]

COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
ENGINES = {"llguidance": "llguidance", "xgrammar": "xgrammar", "outlines-core": "outlines_core"}


def available(name: str) -> bool:
    return importlib.util.find_spec(ENGINES[name]) is not None


class Llguidance:
    name = "llguidance"

    def __init__(self, vocab: TokenBytes, threads: int, encode: Callable[[bytes], list[int]]) -> None:
        import llguidance as llg
        import llguidance.numpy  # noqa: F401

        class Wrapped:  # the end token past the vocabulary; forced text (its mask allows those ids) encoded
            tokens = [*vocab.tokens, b""]
            eos_token_id = len(vocab.tokens)
            bos_token_id = None
            special_token_ids = sorted(vocab.special | {len(vocab.tokens)})

            def __call__(self, text: str | bytes) -> list[int]:
                return encode(text if isinstance(text, bytes) else text.encode("utf-8"))

        self.llg = llg
        self.tokenizer = llg.LLTokenizer(llg.TokenizerWrapper(Wrapped()), n_vocab=len(vocab.tokens) + 1)
        self.executor = llg.LLExecutor(threads)
        self.version = llg.__version__

    def compile(self, schema: str) -> Any:
        grammar = self.llg.LLMatcher.grammar_from_json_schema(schema, overrides=COMPACT)
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    def matchers(self, compiled: Any, n: int) -> list[Any]:
        return [compiled.deep_copy() for _ in range(n)]

    def fill(self, matchers: Sequence[Any], bits: np.ndarray) -> None:
        self.llg.numpy.fill_next_token_bitmask_par(self.executor, [(m, k) for k, m in enumerate(matchers)], bits)

    def advance(self, matchers: Sequence[Any], tokens: Sequence[int]) -> None:
        for m, t in zip(matchers, tokens):
            if not m.consume_token(int(t)):
                raise ValueError(m.get_error())


class Xgrammar:
    name = "xgrammar"

    def __init__(self, vocab: TokenBytes, threads: int, encode: Callable[[bytes], list[int]]) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        end = len(vocab.tokens)
        info = xgr.TokenizerInfo([*vocab.tokens, b""], xgr.VocabType.RAW, vocab_size=end + 1, stop_token_ids=[end])
        self.compiler = xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=False)
        self.batch = xgr.BatchGrammarMatcher(threads)
        self.version = metadata.version("xgrammar")

    def compile(self, schema: str) -> Any:
        return self.compiler.compile_json_schema(schema, any_whitespace=False, separators=(", ", ": "))

    def matchers(self, compiled: Any, n: int) -> list[Any]:
        return [self.xgr.GrammarMatcher(compiled) for _ in range(n)]

    def fill(self, matchers: Sequence[Any], bits: np.ndarray) -> None:
        self.batch.batch_fill_next_token_bitmask(list(matchers), bits)

    def advance(self, matchers: Sequence[Any], tokens: Sequence[int]) -> None:
        for m, t in zip(matchers, tokens):
            if not m.accept_token(int(t)):
                raise ValueError(f"xgrammar refused token {t}")


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, vocab: TokenBytes, threads: int, encode: Callable[[bytes], list[int]]) -> None:
        import outlines_core as oc

        self.oc = oc
        end = len(vocab.tokens)
        by_bytes: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.tokens):
            if b and i not in vocab.special:
                by_bytes.setdefault(b, []).append(i)
        self.vocabulary = oc.Vocabulary(end, by_bytes)
        self.version = metadata.version("outlines_core")

    def compile(self, schema: str) -> Any:
        if schema == '{"type":"object"}':
            raise NotImplementedError("a regular expression cannot nest without bound (any JSON object)")
        regex = self.oc.json_schema.build_regex_from_schema(schema, whitespace_pattern=" ?")
        return self.oc.Index(regex, self.vocabulary)

    def matchers(self, compiled: Any, n: int) -> list[Any]:
        return [self.oc.Guide(compiled) for _ in range(n)]

    def fill(self, matchers: Sequence[Any], bits: np.ndarray) -> None:
        words = bits.shape[1]
        for k, guide in enumerate(matchers):
            guide.write_mask_into(bits[k].ctypes.data, words, 4)

    def advance(self, matchers: Sequence[Any], tokens: Sequence[int]) -> None:
        for guide, t in zip(matchers, tokens):
            guide.advance(int(t), return_tokens=False)


def make_engine(name: str, vocab: TokenBytes, threads: int, encode: Callable[[bytes], list[int]]) -> Any:
    """Engine ``name`` over ``vocab``; ``encode`` gives the ids that spell some bytes (llguidance allows
    those ids where the grammar forces text)."""
    kinds = {"llguidance": Llguidance, "xgrammar": Xgrammar, "outlines-core": OutlinesCore}
    return kinds[name](vocab, threads, encode)

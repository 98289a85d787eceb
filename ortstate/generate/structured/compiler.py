"""JSON schemas compiled for one vocabulary: llguidance (the ``structured`` extra) behind
:class:`Grammars`, made once per tokenizer and logits width by :func:`grammars_for`.

A schema (the text :func:`~.schema.schema_text` made) is compiled once: compiled schemas are kept,
the :data:`CACHE_SIZE` most recently used, each with the plan of its shortest answer
(:mod:`.closing`); each row's :class:`~.matcher.Matcher` is a copy of the compiled one
(microseconds).

Answers are compact JSON as Python's ``json.dumps`` writes it (``", "`` and ``": "`` between items,
no other whitespace): a model with random weights cannot wander off into whitespace. What a schema
costs once compiled is bounded by llguidance's limits (:data:`LIMITS`): a schema whose grammar or
patterns pass them is refused when compiled, a step that would pass them fails the generation;
both are one-line :class:`~ortstate.errors.GenerationError` naming ``json_schema``.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ...errors import GenerationError
from ...extras import install_hint
from .closing import Closer
from .matcher import Matcher
from .schema import pattern_bytes
from .text import one_line
from .vocab import TokenBytes, token_bytes

__all__ = ["CACHE_SIZE", "LIMITS", "PLAN_LIMIT", "Grammars", "check_schema", "grammars_for"]

CACHE_SIZE = 64  # compiled schemas kept per vocabulary
PLAN_LIMIT = 65_536  # tokens a schema's shortest answer is searched for
# llguidance's LLParserLimits: its defaults but the errors, which would quote the grammar (a client's)
LIMITS: dict[str, Any] = {
    "max_items_in_row": 2_000,
    "initial_lexer_fuel": 1_000_000,  # building a schema's patterns: ~20 ms of work at most
    "step_lexer_fuel": 200_000,  # one mask: ~15 ms of lexer work at most
    "step_max_items": 50_000,
    "max_lexer_states": 250_000,
    "max_grammar_size": 500_000,
    "verbose_errors": False,
}
COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _engine() -> Any:
    try:
        import llguidance
        import llguidance.numpy  # noqa: F401  (its mask helpers)
    except ImportError:
        raise GenerationError(
            f"json_schema needs the structured extra (llguidance missing): {install_hint('structured')}",
            field="json_schema",
        ) from None
    return llguidance


def _grammar(llg: Any, schema: str) -> str:
    try:
        return str(llg.LLMatcher.grammar_from_json_schema(schema, overrides=COMPACT))
    except ValueError as exc:
        raise GenerationError(f"json_schema: {one_line(str(exc))}", field="json_schema") from None


def check_schema(schema: str) -> None:
    """Raise what compiling ``schema`` (:func:`~.schema.schema_text`'s) would for any tokenizer: the
    structured extra missing, a keyword llguidance does not implement, a bad pattern, a limit passed."""
    llg = _engine()
    error = llg.LLMatcher.validate_grammar(_grammar(llg, schema), None, limits=llg.LLParserLimits(**LIMITS))
    if error:
        raise GenerationError(f"json_schema: {one_line(error)}", field="json_schema")


class _Wrapped:
    """What llguidance's ``TokenizerWrapper`` reads: the tokens' bytes, an end token past the logits,
    and an encoder whose tokens spell the text it is given (llguidance writes forced text with it)."""

    def __init__(self, vocab: TokenBytes, encode: Callable[[str], list[int]] | None) -> None:
        width = len(vocab.tokens)
        self.tokens = [*vocab.tokens, b""]
        self.eos_token_id = width
        self.bos_token_id = None
        self.special_token_ids = sorted(vocab.special | {width})
        self._vocab = vocab
        self._encode = encode

    def __call__(self, text: str | bytes) -> list[int]:
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        if self._encode is not None:
            try:
                ids = self._encode(data.decode("utf-8"))
            except UnicodeDecodeError:
                ids = []
            if b"".join(self.tokens[i] if 0 <= i < len(self.tokens) else b"?" for i in ids) == data:
                return ids  # the tokenizer's own ids spell the text: the model's usual tokens
        return self._vocab.spell(data)


class _Compiled(NamedTuple):
    matcher: Any  # llguidance's, never moved: rows get copies
    plan: list[int] | None  # its shortest answer's tokens (None: none found)
    hints: list[int]  # its patterns' characters, as single-byte tokens


class Grammars:
    """JSON schemas compiled for one vocabulary: the tokens' bytes and the model's logits width.

    Args:
        vocab: each id's bytes (:func:`~.vocab.token_bytes`), as many as the logits are wide.
        encode: the tokenizer's text -> ids (without special tokens), for forced text; a greedy
            longest-token match where it does not spell the text.

    Raises:
        GenerationError: the structured extra missing (naming how to install it).
    """

    def __init__(self, vocab: TokenBytes, encode: Callable[[str], list[int]] | None = None) -> None:
        self._llg = _engine()
        self.width = len(vocab.tokens)
        wrapped = _Wrapped(vocab, encode)
        self._tokenizer = self._llg.LLTokenizer(self._llg.TokenizerWrapper(wrapped), n_vocab=self.width + 1)
        self._limits = self._llg.LLParserLimits(**LIMITS)
        self.closer = Closer(vocab, wrapped)
        self._compiled: OrderedDict[str, _Compiled] = OrderedDict()
        self._lock = threading.Lock()

    def compile(self, schema: str) -> _Compiled:
        """The compiled schema: its pristine matcher, the plan of its shortest answer (None: none
        found within :data:`PLAN_LIMIT` tokens), its patterns' characters; cached.

        Raises:
            GenerationError: llguidance refuses the schema (a keyword it does not implement, a bad
                pattern, a limit passed), its reason in one line.
        """
        with self._lock:
            found = self._compiled.get(schema)
            if found is not None:
                self._compiled.move_to_end(schema)
                return found
        grammar = _grammar(self._llg, schema)
        matcher = self._llg.LLMatcher(self._tokenizer, grammar, log_level=0, limits=self._limits)
        if matcher.is_error():
            raise GenerationError(f"json_schema: {one_line(matcher.get_error())}", field="json_schema")
        hints = self.closer.ids(pattern_bytes(schema))
        compiled = _Compiled(matcher, self.closer.plan(matcher, PLAN_LIMIT, hints=hints), hints)
        with self._lock:
            self._compiled[schema] = compiled
            while len(self._compiled) > CACHE_SIZE:
                self._compiled.popitem(last=False)
        return compiled

    def matcher(self, schema: str, stops: Iterable[int] = (), budget: int | None = None) -> Matcher:
        """A new row's matcher for ``schema``, ended by ``stops``, whose answer must be whole within
        ``budget`` tokens (None: not kept to one; see :mod:`.matcher`).

        Raises:
            GenerationError: as :meth:`compile`; or the shortest answer is longer than ``budget``
                (``field`` ``max_new_tokens``).
        """
        compiled, plan, hints = self.compile(schema)
        if budget is not None and plan is None:
            raise GenerationError(
                f"json_schema: no answer of at most {PLAN_LIMIT} tokens found (one must close within max_new_tokens)",
                field="json_schema",
            )
        if budget is not None and plan is not None and len(plan) > budget:
            raise GenerationError(
                f"max_new_tokens {budget} is too few for the shortest answer json_schema allows ({len(plan)} tokens)",
                field="max_new_tokens",
            )
        ids = np.array(sorted({int(t) for t in stops if 0 <= int(t) < self.width}), np.int64)
        closer = None if budget is None else self.closer
        plan = None if plan is None else list(plan)
        return Matcher(compiled.deep_copy(), ids, self.width, closer, budget, plan, hints)


_LOCK = threading.Lock()
_BY_TOKENIZER: weakref.WeakKeyDictionary[Any, dict[int | None, Grammars]] = weakref.WeakKeyDictionary()


def grammars_for(tokenizer: Any, width: int | None) -> Grammars:
    """The :class:`Grammars` of a :class:`~ortstate.generate.Tokenizer` for logits ``width`` wide (None:
    as many as the tokenizer has ids), made once per tokenizer object and width (reading 150,000
    tokens takes about a second).

    Raises:
        GenerationError: the tokenizer is not one read from a ``tokenizer.json``, its decoder or model
            cannot be read, or the structured extra is missing.
    """
    backend = getattr(tokenizer, "backend", None)
    if backend is None or not callable(getattr(backend, "to_str", None)):
        raise GenerationError(
            f"json_schema needs the model's tokenizer.json (an ortstate Tokenizer), got {type(tokenizer).__name__}",
            field="json_schema",
        )
    with _LOCK:
        found = _BY_TOKENIZER.get(tokenizer, {}).get(width)
    if found is not None:
        return found
    _engine()  # the missing extra first: before the vocabulary is read
    source = Path(str(getattr(tokenizer, "source", "tokenizer.json"))).name  # a reply names no path of this machine
    vocab = token_bytes(json.loads(backend.to_str()), width, source)
    grammars = Grammars(vocab, lambda text: tokenizer.encode(text, add_special_tokens=False))
    with _LOCK:  # a racing thread's, if it was first
        return _BY_TOKENIZER.setdefault(tokenizer, {}).setdefault(width, grammars)

"""Structured output: answers that parse as JSON and validate against a JSON schema, on any weights.

A ``json_schema`` search option (:class:`~ortstate.generate.SearchOptions`) is checked and made
compact text by :func:`schema_text` (bounds: :mod:`.schema`); :func:`grammars_for` compiles it for a
tokenizer (the ``structured`` extra: llguidance); each row gets a :class:`Matcher`; every step,
:func:`mask_logits` masks every constrained row's logits in one call, :func:`advance` moves the
matchers by the picked tokens (a row keeps within its budget: :mod:`.matcher`), and a row whose
:attr:`Matcher.complete` is true stops.
See docs/structured-output.md.
"""

from .compiler import CACHE_SIZE, LIMITS, PLAN_LIMIT, Grammars, check_schema, grammars_for
from .matcher import Matcher, advance, mask_logits
from .schema import JSON_OBJECT, MAX_DEPTH, MAX_ENUM_VALUES, MAX_PATTERN_CHARS, MAX_SCHEMA_CHARS, schema_text
from .vocab import TokenBytes, token_bytes

__all__ = [
    "CACHE_SIZE",
    "JSON_OBJECT",
    "LIMITS",
    "MAX_DEPTH",
    "MAX_ENUM_VALUES",
    "MAX_PATTERN_CHARS",
    "MAX_SCHEMA_CHARS",
    "PLAN_LIMIT",
    "Grammars",
    "Matcher",
    "TokenBytes",
    "advance",
    "check_schema",
    "grammars_for",
    "mask_logits",
    "schema_text",
    "token_bytes",
]

"""JSON from a client, read with bounds: what a server parses of a body it has not checked yet.

Python's ``json`` recurses once per nesting level (a body of 100,000 ``[`` raises ``RecursionError``),
turns a number of any length into an ``int`` (``ValueError`` past 4,300 digits, quadratic cost
below), takes ``NaN`` and ``Infinity``, and decodes ``"\\ud800"`` to a string that no encoder can
write back (a reply echoing it fails). :func:`read_json` refuses each of those with a
:class:`~ortstate.errors.ServeError` (code 400) saying what, before or as it parses, at a cost
linear in the text and without a Python loop over it:

- the text must be UTF-8;
- one pass of numpy over the bytes finds what lies outside strings (a quote opens or closes one
  unless an odd run of backslashes comes before it); there, the nesting depth is the largest running
  sum of ``[``/``{`` (+1) and ``]``/``}`` (-1), refused past :data:`MAX_DEPTH`, and a run of number
  characters longer than :data:`MAX_NUMBER_CHARS` is refused;
- ``NaN`` and ``Infinity`` are refused as the parser meets them;
- a string holding a lone UTF-16 surrogate (the escape ``\\ud800`` without its pair) is refused,
  naming the top-level field that holds it: only a text with a surrogate escape is checked, by
  encoding the parsed value again (one C pass), then each top-level field's.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from ..errors import ServeError

__all__ = ["MAX_DEPTH", "MAX_NUMBER_CHARS", "read_json"]

MAX_DEPTH = 64  # arrays and objects inside one another (OpenAI's bodies need 5)
MAX_NUMBER_CHARS = 100  # a number's text: sign, digits, point and exponent

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_STEP = np.zeros(256, np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_NUMBER = np.zeros(256, bool)
_NUMBER[list(b"0123456789+-.eE")] = True
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # a surrogate's \u escape (half of a pair, or lone)


def read_json(data: bytes, what: str = "the request body") -> Any:
    """``data`` parsed as JSON, within this module's bounds.

    Args:
        what: names the text in errors ("the request body", "the text message").

    Raises:
        ServeError: code 400 (``field``: the top-level field at fault, where one is): not UTF-8, not
            JSON, nested deeper than :data:`MAX_DEPTH`, a number over :data:`MAX_NUMBER_CHARS`
            characters, ``NaN`` or ``Infinity``, a lone surrogate.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refused(f"{what} is not UTF-8 (byte {exc.start} is {data[exc.start]:#04x})") from None
    depth, longest = _scan(np.frombuffer(data, np.uint8))
    if depth > MAX_DEPTH:
        raise _refused(f"{what} nests arrays and objects {depth} deep: at most {MAX_DEPTH}")
    if longest > MAX_NUMBER_CHARS:
        raise _refused(f"{what} holds a number of {longest} characters: at most {MAX_NUMBER_CHARS}")
    try:
        value = json.loads(text, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise _refused(f"{what} is not valid JSON: {exc}") from None
    except _ConstantError as exc:
        raise _refused(f"{what} holds {exc}, which is not a JSON number") from None
    if _SURROGATE_ESCAPE.search(data) and _lone_surrogate(value):
        raise _refused(*_where_lone(value, what))
    return value


def _where_lone(value: Any, what: str) -> tuple[str, str | None]:
    """What to say of a lone surrogate in ``value`` and the top-level field that holds it (never
    the text itself: it cannot be written)."""
    said = "holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair)"
    for key, inner in value.items() if isinstance(value, dict) else ():
        if _lone_surrogate(key):
            return f"a field name in {what} {said}", None
        if _lone_surrogate(inner):
            return f"{key} {said}", key
    return f"{what} {said}", None


def _scan(codes: np.ndarray) -> tuple[int, int]:
    """The deepest nesting of arrays and objects and the longest run of number characters outside
    strings. Where the text is not JSON the parser refuses it at or before the first place this
    reading and its own differ, so no bracket it would recurse on is missed."""
    if not len(codes):
        return 0, 0
    quote = codes == _QUOTE
    backslash = codes == _BACKSLASH
    if backslash.any():  # a quote after an odd run of backslashes is escaped: no string ends there
        last_other = _last_where(~backslash)
        at = np.flatnonzero(quote[1:]) + 1
        quote[at[(at - 1 - last_other[at - 1]) % 2 == 1]] = False
    outside = (np.cumsum(quote, dtype=np.int32) & 1) == 0
    outside &= ~quote
    depth = int(np.cumsum(_STEP[codes] * outside, dtype=np.int32).max(initial=0))
    number = _NUMBER[codes] & outside
    longest = int((np.arange(len(codes), dtype=np.int32) - _last_where(~number)).max()) if number.any() else 0
    return depth, longest


def _last_where(mask: np.ndarray) -> np.ndarray:
    """For each position, the last position at or before it where ``mask`` holds (-1: none)."""
    last = np.where(mask, np.arange(len(mask), dtype=np.int32), np.int32(-1))
    return np.maximum.accumulate(last)


class _ConstantError(ValueError):
    """Raised by the parser's hook (``json`` lets its exceptions through)."""


def _constant(text: str) -> float:
    raise _ConstantError(text)


def _lone_surrogate(value: Any) -> bool:
    """Whether ``value`` holds a string with a surrogate (after parsing, a pair is one character:
    what is left is lone), found by encoding it as the reply would (in C)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _refused(message: str, field: str | None = None) -> ServeError:
    error = ServeError(message, 400)
    error.field = field
    return error

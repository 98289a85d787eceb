"""serve/json_body.py: what JSON text a server takes from a client, against ``json.loads`` as the
oracle for what it takes, and the exact refusal (message and field) for each bound it keeps: UTF-8,
nesting depth (brackets in strings and after escaped quotes not counted), number length, ``NaN``,
lone surrogates."""

from __future__ import annotations

import json

import pytest

from ortstate.errors import ServeError
from ortstate.serve.json_body import MAX_DEPTH, MAX_NUMBER_CHARS, read_json

SURROGATE = "holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair)"


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


TAKEN = [
    b'{"model": "llama", "prompt": "x", "max_tokens": 8, "temperature": 0.5, "stop": null, "stream": false}',
    nested(MAX_DEPTH),
    b'{"a": "' + b"[" * 1000 + b'"}',  # brackets inside a string are text
    b'{"a": "\\"' + b"[" * 1000 + b'"}',  # ... after an escaped quote too
    b'{"a": "\\\\\\"[[[["}',  # an escaped backslash, then an escaped quote: still inside
    b'{"a": ' + b"9" * MAX_NUMBER_CHARS + b"}",
    b'{"a": -1.25e-300, "b": 1e400}',  # 1e400 parses as infinity: the fields' checks refuse it
    b'{"a": "' + b"9" * 5000 + b'"}',  # digits in a string are text
    b'{"emoji": "\\ud83d\\ude00", "plain": "\\u00e9"}',  # a surrogate pair is one character
    b'{"a": "\\\\ud800"}',  # a backslash, then the text ud800: no escape
    '{"a": "caf\u00e9 \u4f60\u597d"}'.encode(),
    b"[1, 2, 3]",
]


@pytest.mark.parametrize("text", TAKEN, ids=range(len(TAKEN)))
def test_what_json_takes_is_taken_as_json_reads_it(text: bytes) -> None:
    assert read_json(text) == json.loads(text)


REFUSED = [
    (b'{"a": "\xff"}', "the request body is not UTF-8 (byte 7 is 0xff)", None),
    (nested(100_000), "the request body nests arrays and objects 100000 deep: at most 64", None),
    (nested(MAX_DEPTH + 1), "the request body nests arrays and objects 65 deep: at most 64", None),
    (
        b'{"a": "\\\\", "b": ' + nested(70) + b"}",  # the escaped backslash does not hide the quote after it
        "the request body nests arrays and objects 71 deep: at most 64",
        None,
    ),
    (
        b'{"max_tokens": ' + b"9" * 5000 + b"}",
        "the request body holds a number of 5000 characters: at most 100",
        None,
    ),
    (
        b'{"a": 1' + b"0" * MAX_NUMBER_CHARS + b"}",
        "the request body holds a number of 101 characters: at most 100",
        None,
    ),
    (b'{"temperature": NaN}', "the request body holds NaN, which is not a JSON number", None),
    (b'{"temperature": -Infinity}', "the request body holds -Infinity, which is not a JSON number", None),
    (b'{"model": "llama", "prompt": "\\ud800"}', f"prompt {SURROGATE}", "prompt"),
    (b'{"model": "\\udfff", "prompt": "x"}', f"model {SURROGATE}", "model"),
    (
        b'{"messages": [{"role": "user", "content": "ok \\ude00"}]}',  # a low half alone
        f"messages {SURROGATE}",
        "messages",
    ),
    (b'{"a": "\\ud83d\\ud83d"}', f"a {SURROGATE}", "a"),  # two high halves: neither paired
    (b'{"\\ud800": 1}', f"a field name in the request body {SURROGATE}", None),
    (b'["\\ud800"]', f"the request body {SURROGATE}", None),
    (
        b"{bad",
        "the request body is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1)",
        None,
    ),
    (
        b'"' + b"a" * 1000,
        "the request body is not valid JSON: Unterminated string starting at: line 1 column 1 (char 0)",
        None,
    ),
    (b"", "the request body is not valid JSON: Expecting value: line 1 column 1 (char 0)", None),
]


@pytest.mark.parametrize(("text", "message", "field"), REFUSED, ids=range(len(REFUSED)))
def test_refused_with_what_and_where(text: bytes, message: str, field: str | None) -> None:
    with pytest.raises(ServeError) as info:
        read_json(text)
    assert (str(info.value), info.value.code, info.value.field) == (message, 400, field)
    str(info.value).encode("utf-8")  # every message can be written in a reply


def test_what_names_the_text() -> None:
    with pytest.raises(ServeError, match="^the text message nests arrays and objects 70 deep"):
        read_json(nested(70), "the text message")

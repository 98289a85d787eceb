"""``ortstate.generate.structured`` without a model: schemas checked against their bounds, token bytes
read from tokenizer.json, the batched mask against a numpy reference, stop tokens, budgets that close
every answer whatever the logits, and the schemas refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from oracle import REPO
from text_tokenizers import CORPUS, byte_bpe, metaspace_bpe, word_tokenizer

from ortstate.extras import install_hint
from ortstate.generate import GenerationError, SearchOptions, Tokenizer
from ortstate.generate.structured import (
    MAX_DEPTH,
    MAX_ENUM_VALUES,
    MAX_PATTERN_CHARS,
    MAX_SCHEMA_CHARS,
    check_schema,
    grammars_for,
    schema_text,
    token_bytes,
)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "scores": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "scores", "address", "active"],
    "additionalProperties": False,
}
SCHEMAS = {
    "object": PERSON,
    "json_object": {"type": "object"},
    "array": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
    "enum": {"enum": ["red", "green", "blue", 7, None]},
    "number": {"type": "number"},
    "recursive": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["v", "kids"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
}
EOS = 0  # byte_bpe's <eos>


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(byte_bpe())


# -- the option ----------------------------------------------------------------------------------------------
def test_a_schema_becomes_compact_text_in_its_own_order() -> None:
    text = schema_text('{"type": "object", "properties": {"b": {}, "a": {}}}')
    assert text == '{"type":"object","properties":{"b":{},"a":{}}}'
    assert SearchOptions(json_schema={"type": "object", "properties": {"b": {}, "a": {}}}).json_schema == text
    assert SearchOptions.build(json_schema=text).json_schema == text


def _deep(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ([1], "json_schema must be a JSON object (a JSON schema), got list"),
        ("{", "json_schema is not JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        ('{"maximum": NaN}', "json_schema holds NaN, which is not JSON"),
        ({"maximum": float("inf")}, "json_schema holds a number that is not finite"),
        (
            {"x": "a" * MAX_SCHEMA_CHARS},
            f"json_schema is {MAX_SCHEMA_CHARS + 8} characters long as compact JSON, more than {MAX_SCHEMA_CHARS} "
            "allowed",
        ),
        (_deep(MAX_DEPTH), f"json_schema nests deeper than {MAX_DEPTH} levels"),
        (
            {"enum": list(range(MAX_ENUM_VALUES + 1))},
            f"json_schema lists more than {MAX_ENUM_VALUES} enum values in all",
        ),
        (
            {"pattern": "a" * (MAX_PATTERN_CHARS + 1)},
            f"json_schema has a pattern of {MAX_PATTERN_CHARS + 1} characters, more than {MAX_PATTERN_CHARS} allowed",
        ),
    ],
    ids=["list", "not-json", "nan", "inf", "long", "deep", "enum", "pattern"],
)
def test_a_bad_or_oversized_schema_is_one_error_naming_it(schema, message) -> None:
    with pytest.raises(GenerationError) as raised:
        SearchOptions.build(json_schema=schema)
    assert str(raised.value) == message and raised.value.field == "json_schema"


def test_beam_search_takes_no_schema() -> None:
    with pytest.raises(GenerationError) as raised:
        SearchOptions.build(num_beams=2, json_schema={"type": "object"})
    assert str(raised.value) == "json_schema does not apply to beam search (num_beams > 1)"


def test_a_schema_one_level_within_the_bounds_is_taken() -> None:
    assert schema_text(_deep(MAX_DEPTH - 1))
    assert schema_text({"enum": list(range(MAX_ENUM_VALUES))})


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "strng"}, "json_schema: Invalid type: strng"),
        ({"not": {"type": "string"}}, 'json_schema: Unimplemented keys: ["not"]'),
        ({"type": "string", "pattern": "(a"}, "json_schema: regex parse error: (a ^ error: unclosed group"),
        ({"$ref": "#/$defs/none"}, "json_schema: Pointer '/$defs/none' does not exist"),
    ],
)
def test_what_the_engine_refuses_is_one_line_before_any_model(schema, message, tokenizer) -> None:
    with pytest.raises(GenerationError) as checked:
        check_schema(schema_text(schema))
    with pytest.raises(GenerationError) as compiled:
        grammars_for(tokenizer, None).matcher(schema_text(schema))
    assert str(checked.value) == str(compiled.value) == message
    assert checked.value.field == compiled.value.field == "json_schema"


def test_without_the_extra_the_error_says_how_to_install_it() -> None:
    code = (
        "import sys\nsys.modules['llguidance'] = None\n"
        "from ortstate.generate.structured import check_schema\n"
        "try:\n    check_schema('{}')\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    want = f"GenerationError json_schema needs the structured extra (llguidance missing): {install_hint('structured')}"
    assert done.stdout.strip() == want, done.stderr


# -- token bytes -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("make", "lead"), [(byte_bpe, b""), (metaspace_bpe, b" ")], ids=["byte-level", "metaspace"])
def test_token_bytes_spell_what_the_tokenizer_encodes(make, lead) -> None:
    tok = make()
    vocab = token_bytes(json.loads(tok.to_str()))
    for line in CORPUS[:1] + CORPUS[3:]:
        ids = tok.encode(line).ids
        assert b"".join(vocab.tokens[i] for i in ids) == lead + line.encode()
    assert all(vocab.tokens[i] == b"" for i in vocab.special) and tok.token_to_id("<eos>") in vocab.special


def test_ids_past_the_vocabulary_write_nothing_and_a_narrower_width_is_refused() -> None:
    data = json.loads(byte_bpe().to_str())
    size = len(token_bytes(data).tokens)
    wide = token_bytes(data, size + 5)
    assert wide.tokens[size:] == (b"",) * 5 and set(range(size, size + 5)) <= wide.special
    with pytest.raises(GenerationError, match=f"the tokenizer has ids up to {size - 1}, the model's logits only 10"):
        token_bytes(data, 10)


def test_a_decoder_whose_bytes_cannot_be_read_is_refused() -> None:
    with pytest.raises(GenerationError) as raised:
        grammars_for(Tokenizer(word_tokenizer(), source="tokenizer.json"), 256)
    assert str(raised.value) == (
        "tokenizer.json: json_schema cannot read the token bytes of a WordPiece decoder "
        "(supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder)"
    )
    with pytest.raises(GenerationError, match="json_schema needs the model's tokenizer.json .* got object"):
        grammars_for(object(), 256)

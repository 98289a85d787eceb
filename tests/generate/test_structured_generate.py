"""``Generator.generate(..., json_schema=...)`` and ``ortstate generate --json-schema`` on the committed
tiny models (random weights: the grammar alone makes the answers valid), in both forms: every answer
parses and validates against its schema and stops when complete; greedy's tokens are the argmax of
the masked logits (a numpy reference over the logits the run kept)."""

from __future__ import annotations

import json
import sys
from functools import cache

import jsonschema
import numpy as np
import pytest
from oracle import REPO, assert_one_line_error, run_cli
from test_structured import SCHEMAS

from ortstate.generate import GenerationError, Generator
from ortstate.generate.structured import schema_text

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="onnxruntime 1.23 (Python 3.10) lacks GroupQueryAttention's causal attribute"
)
LLM = REPO / "models" / "llm"
FORMS = ("custom-op", "explicit")
PROMPT = [1, 18, 152, 24]
BUDGET = 120  # the tiny models' context is 128 positions


@cache
def generator(family: str, form: str) -> Generator:
    return Generator.from_dir(LLM / family, form=form)


def _valid(gen: Generator, tokens: list[int], schema: dict) -> None:
    jsonschema.validate(json.loads(gen.tokenizer.decode(tokens)), schema)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_answer_parses_validates_and_stops_complete(family, form, name) -> None:
    gen, schema = generator(family, form), SCHEMAS[name]
    for search in ({}, {"do_sample": True, "seed": 3}, {"do_sample": True, "seed": 4, "temperature": 2.0}):
        tokens = gen.generate(PROMPT, BUDGET, json_schema=schema, **search)
        assert gen.last_run is not None and gen.last_run.stop_reason in ("grammar", "eos"), search
        _valid(gen, tokens[:-1] if gen.last_run.stop_reason == "eos" else tokens, schema)


@pytest.mark.parametrize("form", FORMS)
def test_greedy_takes_the_argmax_of_the_masked_logits(form) -> None:
    """Replayed on an own matcher: its bitmask (llguidance's one-row call) over the logits the run kept."""
    gen = generator("llama", form)
    schema = {"type": "array", "items": {"enum": ["one", "two", "three"]}, "maxItems": 4}
    tokens = gen.generate(PROMPT, BUDGET, json_schema=schema, keep_logits=True, stop_at_eos=False)
    assert gen.last_run is not None and gen.last_run.stop_reason == "grammar" and gen.last_run.logits is not None
    grammars = _grammars(gen)
    inner = grammars.compile(schema_text(schema)).matcher.deep_copy()
    width = gen.last_run.logits.shape[-1]
    for step, token in enumerate(tokens):
        allowed = np.unpackbits(np.frombuffer(inner.compute_bitmask(), np.uint8), bitorder="little")[:width] > 0
        assert token == int(np.argmax(np.where(allowed, gen.last_run.logits[step, 0], -np.inf)))
        assert inner.consume_token(token)
    assert inner.is_stopped()
    _valid(gen, tokens, schema)


def _grammars(gen: Generator):
    from ortstate.generate.structured import grammars_for

    return grammars_for(gen.tokenizer, gen.vocab_size)


def test_a_batch_and_its_choices_are_each_constrained() -> None:
    gen = generator("qwen2", "custom-op")
    schema = SCHEMAS["object"]
    rows = gen.generate_batch([PROMPT, PROMPT[:2]], 110, json_schema=schema, do_sample=True, n=2, seed=9)
    assert len(rows) == 4 and len({tuple(r) for r in rows}) > 1
    assert gen.last_run is not None and set(gen.last_run.stop_reasons) <= {"grammar", "eos"}
    for tokens, why in zip(rows, gen.last_run.stop_reasons):
        _valid(gen, tokens[:-1] if why == "eos" else tokens, schema)


def test_a_budget_too_short_and_a_bad_schema_fail_before_anything_runs() -> None:
    gen = generator("llama", "custom-op")
    past = gen.past_tokens
    with pytest.raises(GenerationError, match="max_new_tokens 5 is too few for the shortest answer") as raised:
        gen.generate(PROMPT, 5, json_schema=SCHEMAS["object"])
    assert raised.value.field == "max_new_tokens"
    with pytest.raises(GenerationError, match='json_schema: Unimplemented keys: \\["not"\\]'):
        gen.generate(PROMPT, 10, json_schema={"not": {}})
    assert gen.past_tokens == past


# -- the command line ----------------------------------------------------------------------------------------
def test_the_cli_answers_json(capsys, tmp_path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMAS["object"]))
    args = ["generate", LLM / "llama", "--prompt", "Name a person:", "-n", 110, "--json-schema", schema]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    jsonschema.validate(json.loads(out), SCHEMAS["object"])
    assert "stopped: the JSON answer is complete" in err


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (None, [], "--json-schema {path}: cannot read it (No such file or directory)"),
        (
            "{",
            [],
            "--json-schema {path}: not a JSON file (Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1))",
        ),
        ("[]", [], "--json-schema: json_schema must be a JSON object (a JSON schema), got list"),
        ('{"not": {}}', [], '--json-schema {path}: json_schema: Unimplemented keys: ["not"]'),
        ("{}", ["--num-beams", "2"], "--json-schema: json_schema does not apply to beam search (num_beams > 1)"),
    ],
    ids=["missing", "not-json", "not-object", "unimplemented", "beams"],
)
def test_the_cli_refuses_a_bad_schema_in_one_line(capsys, tmp_path, content, extra, message) -> None:
    path = tmp_path / "schema.json"
    if content is not None:
        path.write_text(content)
    code, _, err = run_cli(capsys, "generate", LLM / "llama", "--prompt-ids", "1,2", "--json-schema", path, *extra)
    assert code == 2
    assert_one_line_error(err, message.format(path=path))

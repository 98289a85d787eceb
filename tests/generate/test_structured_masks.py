"""The batched mask against each row's own matcher, stop tokens, completion, and budgets: whatever the
logits pick, every answer parses, validates against its schema and fits its budget."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from test_structured import EOS, PERSON, SCHEMAS
from text_tokenizers import byte_bpe

from ortstate.generate import GenerationError, Tokenizer
from ortstate.generate.structured import PLAN_LIMIT, Grammars, advance, grammars_for, mask_logits, schema_text

NEG = np.float32(-np.inf)
WIDTH = 330  # byte_bpe's 320 ids and ten the model has beyond them
TEXT = byte_bpe()  # what the answers' tokens say, by the tokenizer's own decoder


@pytest.fixture(scope="module")
def grammars() -> Grammars:
    return grammars_for(Tokenizer(byte_bpe()), WIDTH)


def _reference(compiled, tokens: list[int], stops: list[int]) -> np.ndarray:
    """Which ids a row may take next, from an own copy of the compiled matcher (llguidance's one-row
    bitmask, not the batched call): its stop tokens where its answer may end."""
    inner = compiled.deep_copy()
    assert inner.consume_tokens(tokens)
    bits = np.frombuffer(inner.compute_bitmask(), np.uint8)
    allowed = np.unpackbits(bits, bitorder="little")[:WIDTH].astype(bool)
    allowed[stops] = inner.is_accepting()
    return allowed


def test_the_batched_mask_is_each_rows_own_and_leaves_others(grammars) -> None:
    text = schema_text(PERSON)
    tok = byte_bpe()
    answers = [
        {
            "name": "Ann",
            "age": 31,
            "role": "admin",
            "scores": [1.5],
            "address": {"city": "Z", "zip": "80331"},
            "active": True,
        },
        {
            "name": "Bo",
            "age": 4,
            "role": "guest",
            "scores": [2, -3e2, 0],
            "address": {"city": "Ulm", "zip": "89073"},
            "active": False,
        },
    ]
    docs = [tok.encode(json.dumps(a)).ids for a in answers]
    matchers = [grammars.matcher(text, [EOS]), None, grammars.matcher(text, [EOS])]
    compiled = grammars.compile(text).matcher
    rng = np.random.default_rng(0)
    for step in range(max(map(len, docs)) + 1):
        logits = rng.standard_normal((3, WIDTH)).astype(np.float32)
        masked = logits.copy()
        mask_logits(masked, matchers)
        assert np.array_equal(masked[1], logits[1])  # no matcher: untouched
        for row, doc in zip((0, 2), docs):
            expected = np.where(_reference(compiled, doc[:step], [EOS]), logits[row], NEG)
            assert np.array_equal(masked[row], expected)
            assert masked[row, doc[step] if step < len(doc) else EOS] != NEG  # the answer's next token is allowed
        picks = [d[step] if step < len(d) else EOS for d in docs]
        assert advance(matchers, [picks[0], 7, picks[1]]) == [picks[0], 7, picks[1]]
    assert all(m.complete for m in (matchers[0], matchers[2]))


def _step(row, token: int) -> np.ndarray:
    """One step as generation takes it: the mask, then the pick; the masked logits."""
    logits = np.zeros((1, WIDTH), np.float32)
    mask_logits(logits, [row])
    assert logits[0, token] == 0
    assert advance([row], [token]) == [token]
    return logits[0]


def test_stop_tokens_are_allowed_exactly_where_the_answer_may_end(grammars) -> None:
    tok = byte_bpe()
    row = grammars.matcher(schema_text({"type": "integer"}), [EOS, 5])
    one, two = tok.encode("12").ids
    assert _step(row, one)[[EOS, 5]].tolist() == [NEG, NEG]  # nothing written yet
    assert _step(row, two)[[EOS, 5]].tolist() == [0, 0] and row.accepting and not row.complete  # 1, 12, 123...
    assert _step(row, EOS)[[EOS, 5]].tolist() == [0, 0]  # a stop token ends the row, not the grammar: kept as is
    whole = grammars.matcher(schema_text({"type": "object"}))
    for token in tok.encode("{}").ids:
        _step(whole, token)
    assert whole.complete  # nothing may follow


def _answer(grammars: Grammars, schema: dict, budget: int, seed: int, greedy: bool) -> tuple[list[int], bool]:
    """Tokens picked from random logits under the mask until the row completes or its budget is spent."""
    rng = np.random.default_rng(seed)
    row = grammars.matcher(schema_text(schema), [EOS], budget)
    tokens: list[int] = []
    while len(tokens) < budget and not row.complete:
        logits = (rng.standard_normal((1, WIDTH)) * 4).astype(np.float32)
        mask_logits(logits, [row])
        if greedy:
            pick = int(logits[0].argmax())
        else:
            weights = np.exp(logits[0] - logits[0].max())
            pick = int(rng.choice(WIDTH, p=weights / weights.sum()))
        (taken,) = advance([row], [pick])
        tokens.append(taken)
        if taken == EOS:
            break
    return tokens, row.complete


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_any_logits_give_a_valid_answer_within_the_budget(grammars, name, greedy) -> None:
    schema = SCHEMAS[name]
    shortest = grammars.compile(schema_text(schema)).plan
    assert shortest is not None
    for budget in (len(shortest), len(shortest) + 3, len(shortest) + 40):
        for seed in range(3):
            tokens, complete = _answer(grammars, schema, budget, seed, greedy)
            text = TEXT.decode([t for t in tokens if t != EOS])
            assert len(tokens) <= budget and (complete or tokens[-1] == EOS), (budget, text)
            jsonschema.validate(json.loads(text), schema)


def test_a_budget_shorter_than_the_shortest_answer_is_refused(grammars) -> None:
    shortest = grammars.compile(schema_text(PERSON)).plan
    assert shortest is not None
    with pytest.raises(GenerationError) as raised:
        grammars.matcher(schema_text(PERSON), [EOS], len(shortest) - 1)
    assert raised.value.field == "max_new_tokens"
    assert str(raised.value) == (
        f"max_new_tokens {len(shortest) - 1} is too few for the shortest answer json_schema allows "
        f"({len(shortest)} tokens)"
    )


def test_a_schema_whose_shortest_answer_is_past_the_search_is_refused(grammars) -> None:
    huge = schema_text({"type": "array", "items": {"type": "integer"}, "minItems": PLAN_LIMIT})
    with pytest.raises(GenerationError) as raised:
        grammars.matcher(huge, [EOS], 10**6)
    assert str(raised.value) == (
        f"json_schema: no answer of at most {PLAN_LIMIT} tokens found (one must close within max_new_tokens)"
    )
    assert grammars.matcher(huge).budget is None  # without a budget to keep, nothing is searched for


def test_logits_of_another_width_are_refused(grammars) -> None:
    row = grammars.matcher(schema_text({"type": "object"}))
    with pytest.raises(GenerationError, match="json_schema: the logits have 320 ids, the grammar's vocabulary 330"):
        mask_logits(np.zeros((1, 320), np.float32), [row])


def test_a_row_out_of_budget_is_allowed_its_plans_next_token_only(grammars) -> None:
    text = schema_text(PERSON)
    shortest = grammars.compile(text).plan
    assert shortest
    row = grammars.matcher(text, [EOS], len(shortest))
    for token in shortest:
        logits = np.zeros((1, WIDTH), np.float32)
        mask_logits(logits, [row])
        assert np.flatnonzero(logits[0] == 0).tolist() == [token]
        assert advance([row], [token]) == [token]
    assert row.complete
    jsonschema.validate(json.loads(TEXT.decode(shortest)), PERSON)


def test_a_pick_the_budget_cannot_close_is_replaced_by_the_plans_token(grammars) -> None:
    tok = byte_bpe()
    brace, close, quote = (tok.token_to_id(c) for c in '{}"')
    row = grammars.matcher(schema_text({"type": "object"}), [EOS], 3)
    _step(row, brace)
    logits = np.zeros((1, WIDTH), np.float32)
    mask_logits(logits, [row])
    assert logits[0, quote] == logits[0, close] == 0  # } fits in the 2 tokens left: a key may start too...
    assert advance([row], [quote]) == [close]  # ...but {"": ...} cannot end in the 2 tokens left
    assert row.complete


HOSTILE = {
    "nested-pattern": {"type": "string", "pattern": "^(a{1,100}){1,100}b$"},
    "backtracking-pattern": {"type": "string", "pattern": "(x+x+)+y"},
    "unanchored-pattern": {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "[A-Z]{3}"}},
        "required": ["code"],
    },
    "long-string": {"type": "string", "minLength": 40, "pattern": "^[a-z ]+$"},
    "deep": {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}},
    "wide-anyof": {
        "anyOf": [
            {"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]} for i in range(200)
        ]
    },
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_schema_within_the_bounds_compiles_and_answers(grammars, name) -> None:
    """What passes the bounds is the engine's to bound: it compiles, masks and closes like any other."""
    schema = HOSTILE[name]
    shortest = grammars.compile(schema_text(schema)).plan
    assert shortest is not None
    tokens, complete = _answer(grammars, schema, len(shortest) + 10, 0, greedy=True)
    assert complete or tokens[-1] == EOS
    jsonschema.validate(json.loads(TEXT.decode([t for t in tokens if t != EOS])), schema)

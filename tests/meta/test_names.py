"""``meta/names.py`` on names as long as a file likes: a glued id split in linear time, to the same
split as the rule's plain definition; new names found with one lookup per name made, whatever the
names' count; a layer's name repeated in the names made from it no longer than its first
:data:`~ortstate.meta.NAME_PREFIX_CHARS` characters."""

from __future__ import annotations

import random

import pytest

from ortstate.convert.builder import Names
from ortstate.meta import NAME_PREFIX_CHARS, name_prefix, split_id
from ortstate.meta.names import shown_id
from ortstate.passes.build import NewNames


def split_by_definition(var_id: str) -> tuple[str, str] | None:
    """:func:`split_id`'s rule as its docstring states it, each cut's sides compared anew: the
    first cut (sides of two characters or more) with the most leading plus trailing characters
    shared, when that is at least two and at least half of the shorter side."""
    best, best_score = 0, 1
    for cut in range(2, len(var_id) - 1):
        left, right = var_id[:cut], var_id[cut:]
        shorter = min(len(left), len(right))
        head = next((i for i in range(shorter) if left[i] != right[i]), shorter)
        tail = next((i for i in range(shorter - head) if left[-1 - i] != right[-1 - i]), shorter - head)
        if head + tail > best_score and 2 * (head + tail) >= shorter:
            best, best_score = cut, head + tail
    return (var_id[:best], var_id[best:]) if best else None


def _ids(seed: int, count: int) -> list[str]:
    """Short ids over small alphabets, half of them a glued pair (the same piece on both sides)."""
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        alphabet = rng.choice(["ab", "abc", "a.1", "kv._0"])
        word = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 20)))
        if rng.random() < 0.5:
            piece = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 8)))
            word = piece + word[: len(word) // 2] + piece + word[len(word) // 2 :]
        found.append(word)
    return found


def test_split_id_splits_as_its_definition_does() -> None:
    ids = _ids(7, 20_000)
    assert [split_id(i) for i in ids] == [split_by_definition(i) for i in ids]
    assert sum(split_id(i) is not None for i in ids) > 5_000  # both answers are well exercised


@pytest.mark.parametrize("length", [100_000, 400_000])
def test_split_id_reads_a_long_id_in_one_pass(length: int) -> None:
    """A run of one character was the slowest id (every cut compared the whole of both sides: it
    is read as a name glued to itself); a glued pair of long names still splits where they meet."""
    half = "x" * (length // 2)
    assert split_id(half + half) == (half, half)
    assert split_id(f"past.{half}present.{half}") == (f"past.{half}", f"present.{half}")


class CountingSet(set[str]):
    """A set of taken names that counts the lookups made in it."""

    lookups = 0

    def __contains__(self, name: object) -> bool:
        self.lookups += 1
        return super().__contains__(name)


@pytest.mark.parametrize("maker", ["converter", "pass"])
def test_many_names_of_one_base_take_one_lookup_each(maker: str) -> None:
    """Both name makers give ``base``, ``base_1``, ``base_2``... (stepping past the model's own
    ``base_3``) with a bounded number of lookups per name: it was one per earlier name."""
    taken = CountingSet({"base_3"})
    if maker == "converter":
        names = Names()
        names._used = taken  # the converter's set of names, counted
        fresh = names.fresh
    else:
        fresh = NewNames(taken)
    made = [fresh("base") for _ in range(2_000)]
    assert made[:5] == ["base", "base_1", "base_2", "base_4", "base_5"] and made[-1] == "base_2000"
    assert len(set(made)) == len(made) and "base_3" not in made
    assert taken.lookups < 3 * len(made), taken.lookups


def test_a_name_is_repeated_up_to_its_prefix() -> None:
    ordinary = "__module.model.layers.0.self_attn/aten::scaled_dot_product_attention/ScaledDotProductAttention"
    assert name_prefix(ordinary) == ordinary
    assert name_prefix("n" * 100_000) == "n" * NAME_PREFIX_CHARS


@pytest.mark.parametrize(
    ("var_id", "shown"),
    [
        ("acc", "'acc'"),
        ("past_key_values.1.valuepresent.1.value", "'past_key_values.1.value' -> 'present.1.value'"),
        ("v\nx\t\x1b[31m\x7f", "'v\\nx\\t\\x1b[31m\\x7f'"),
        ("κλειδί🔑/a:0.b", "'κλειδί🔑/a:0.b'"),
        ("k" + "a" * 100_000 + "1", f"'k{'a' * (NAME_PREFIX_CHARS - 1)}...{'a' * 19}1' (100002 characters)"),
        ("k" + "a" * 100_000 + "2", f"'k{'a' * (NAME_PREFIX_CHARS - 1)}...{'a' * 19}2' (100002 characters)"),
        ("k" + "b" * 100_000 + "\n", f"'k{'b' * (NAME_PREFIX_CHARS - 1)}...{'b' * 19}\\n' (100002 characters)"),
        (
            "a" * 100_000,
            f"'{'a' * NAME_PREFIX_CHARS}...{'a' * 20}' (50000 characters) -> "
            f"'{'a' * NAME_PREFIX_CHARS}...{'a' * 20}' (50000 characters)",
        ),
    ],
    ids=["plain", "glued", "control", "unicode", "long1", "long2", "long-control", "long-glued"],
)
def test_a_message_shows_any_id_on_one_bounded_line(var_id: str, shown: str) -> None:
    """A message quoting a variable id of 100,000 characters was 100,000 characters long, and a
    newline in an id broke its one line; twins differing at their end stay apart."""
    assert shown_id(var_id) == shown
    assert len(shown_id("x" * 10**6)) < 2 * NAME_PREFIX_CHARS + 100

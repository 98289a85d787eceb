"""The prefix tree alone: longest matches, what a partly fed entry holds, lock refs, least recently
used eviction, redundant entries, the cache's counts, and the tree's shape as entries come and go."""

from __future__ import annotations

import random

import pytest

from ortstate.errors import OrtStateError
from ortstate.scheduler.prefix_tree import Match, PrefixTree


def _tree(*entries: tuple) -> PrefixTree:
    """``entries``: ``(key, tokens[, held[, pins]])`` inserted in order."""
    tree = PrefixTree()
    for key, tokens, *more in entries:
        tree.insert(key, tokens, *more)
    return tree


SYSTEM = (1, 2, 3, 4)
MATCHES = {
    "none": ([("a", (5, 6))], (1, 2), Match(None, 0, 0)),
    "the longest of two that part": ([("a", SYSTEM + (7, 8)), ("b", SYSTEM + (9,))], SYSTEM + (7, 9), Match("a", 5, 5)),
    "mid-edge": ([("a", SYSTEM + (7, 8))], (1, 2, 9), Match("a", 2, 2)),
    "a prompt shorter than the entry": ([("a", SYSTEM + (7, 8))], (1, 2, 3), Match("a", 3, 3)),
    "the whole entry and more": ([("a", SYSTEM)], SYSTEM + (5, 6), Match("a", 4, 4)),
    # a running request's prompt fed up to 2 of 6: 2 held now, 5 once it is fed
    "partly held": ([("r", SYSTEM + (7, 8), 2, 1)], SYSTEM + (7, 9), Match("r", 2, 5)),
    "a held one beats a longer partly held one": (
        [("r", SYSTEM + (7, 8), 2, 1), ("c", SYSTEM[:3])],
        SYSTEM + (7, 9),
        Match("c", 3, 5),
    ),
    # of equals, the most recently used
    "equals": ([("a", SYSTEM + (7,)), ("b", SYSTEM + (8,))], SYSTEM + (9,), Match("b", 4, 4)),
}


@pytest.mark.parametrize("name", MATCHES)
def test_longest_match(name: str) -> None:
    entries, prompt, expected = MATCHES[name]
    assert _tree(*entries).match(prompt) == expected


def test_lru_eviction_skips_pinned_entries_and_a_match_counts_as_a_use() -> None:
    tree = _tree(("a", (1, 2)), ("b", (3, 4, 5)), ("c", (6,)), ("r", (7, 8), 1, 1))
    assert (tree.cached, tree.cached_positions) == (3, 6)  # r is pinned: not the cache's
    assert list(tree.victims()) == ["a", "b", "c"]
    assert tree.match((1, 2, 9)).key == "a"
    assert list(tree.victims()) == ["b", "c", "a"]
    tree.pin("b")  # a lock ref: matched, never evicted
    assert (list(tree.victims()), tree.cached, tree.cached_positions) == (["c", "a"], 2, 3)
    assert tree.match((3, 4)) == Match("b", 2, 2)
    tree.unpin("b")  # used just now
    assert (list(tree.victims()), tree.cached, tree.cached_positions) == (["c", "a", "b"], 3, 6)
    tree.hold("r", 2), tree.unpin("r")  # a request that ended: its stream is the cache's
    assert (list(tree.victims())[-1], tree.cached, tree.cached_positions) == ("r", 4, 8)


REDUNDANT = {
    # a longer entry that holds a cached one's tokens makes it redundant
    "extends a cached one": ([("a", (1, 2))], ("b", (1, 2, 3)), ("a",), ["b"]),
    # a new entry another holds whole is redundant itself
    "held by another": ([("a", (1, 2, 3))], ("b", (1, 2)), ("b",), ["a"]),
    "the same tokens": ([("a", (1, 2))], ("b", (1, 2)), ("b",), ["a"]),
    "held by a running one": ([("r", (1, 2, 3), 3, 1)], ("b", (1, 2)), ("b",), ["r"]),
    "not held yet by a running one": ([("r", (1, 2, 3), 1, 1)], ("b", (1, 2)), (), ["r", "b"]),
    "a pinned one is never redundant": ([("p", (1,), 1, 1)], ("b", (1, 2)), (), ["p", "b"]),
    "parting ways": ([("a", (1, 2, 3))], ("b", (1, 2, 4)), (), ["a", "b"]),
    "empty": ([], ("b", ()), ("b",), []),
}


@pytest.mark.parametrize("name", REDUNDANT)
def test_redundant_entries_go_at_once(name: str) -> None:
    before, (key, tokens), gone, left = REDUNDANT[name]
    tree = _tree(*before)
    assert tree.insert(key, tokens) == gone
    assert sorted(k for k in left if k in tree) == sorted(left) and len(tree) == len(left)


def test_the_tree_keeps_its_shape_as_entries_come_and_go() -> None:
    """Random entries inserted and removed: every match is the brute-force longest common start
    among what remains, and the tree is a lone root again once all are gone."""
    rng = random.Random(7)
    tree, alive = PrefixTree(), {}
    for step in range(400):
        if alive and rng.random() < 0.4:
            key = rng.choice(sorted(alive))
            tree.remove(key)
            del alive[key]
        else:
            tokens = tuple(rng.choice((1, 2, 3)) for _ in range(rng.randint(1, 8)))
            tree.insert(step, tokens, len(tokens), 1)  # pinned: nothing redundant goes
            alive[step] = tokens
        prompt = tuple(rng.choice((1, 2, 3)) for _ in range(rng.randint(1, 9)))
        found = tree.match(prompt)
        best = max((_common(t, prompt) for t in alive.values()), default=0)
        assert found.length == found.longest == best
        assert found.key is None or _common(alive[found.key], prompt) == best
    for key in list(alive):
        tree.remove(key)
    assert not tree._root.children and not tree._root.under and len(tree) == 0


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_what_the_tree_refuses() -> None:
    tree = _tree(("a", (1, 2)))
    with pytest.raises(OrtStateError, match="cannot insert 'a'"):
        tree.insert("a", (3,))
    with pytest.raises(OrtStateError, match="cannot insert 'b' \\(1 tokens, 2 held\\)"):
        tree.insert("b", (3,), 2)
    with pytest.raises(OrtStateError, match="'a' is not pinned"):
        tree.unpin("a")
    with pytest.raises(OrtStateError, match="no entry 'z'"):
        tree.hold("z", 1)

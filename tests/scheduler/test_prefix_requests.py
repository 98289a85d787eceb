"""Generation requests with the prefix cache, no model: which stream each prompt starts from, who
waits for a prompt being fed, and which cached streams are evicted to keep the rows and the KV
budget (tables of plans, as tests/scheduler/test_requests.py)."""

from __future__ import annotations

import pytest

from ortstate.scheduler.requests import Limits, Plan, Scheduler

SYSTEM = tuple(range(100, 110))  # a 10-token system prompt


def _run(limits: Limits, script: list[tuple]) -> tuple[list[Plan], list[tuple]]:
    """``script``: ``("add", rid, ids, max_new_tokens[, choices])``, ``("end", rid)``, ``("cache",
    key, ids)`` or ``("tick",)``; the plans of the ticks, and what each ``cache`` closed."""
    scheduler, plans, closed = Scheduler(limits), [], []
    for op, *args in script:
        if op == "add":
            rid, ids, new, *choices = args
            scheduler.add(rid, len(ids), new, 0, *choices, ids=ids)
        elif op == "end":
            scheduler.end(*args)
        elif op == "cache":
            closed.append(scheduler.cache(*args))
        else:
            plans.append(scheduler.schedule())
    return plans, closed


ROOMY = Limits(8, 1000, 256, prefix_cache=True)
A, B = SYSTEM + (1, 2), SYSTEM + (3,)

CASES = {
    # a prompt a running request still feeds waits until it holds the shared start, then copies it
    "shared system prompt": (
        Limits(8, 1000, 8, prefix_cache=True),
        [("add", 0, A, 4), ("add", 1, B, 4), ("tick",), ("tick",), ("tick",)],
        [
            Plan(admit=(0,), chunks=((0, 0, 8),)),
            Plan(chunks=((0, 8, 4),)),
            Plan(admit=(1,), decode=(0,), chunks=((1, 10, 1),), prefixes=((1, 0, 10, False),)),
        ],
        [],
    ),
    # nothing shared: no wait, no prefix
    "nothing shared": (
        ROOMY,
        [("add", 0, (1, 2), 4), ("add", 1, (3, 4), 4), ("tick",)],
        [Plan(admit=(0, 1), chunks=((0, 0, 2), (1, 0, 2)))],
        [],
    ),
    # a chat's next turn extends all the cached stream holds: it takes that stream (no copy)
    "next turn": (
        ROOMY,
        [
            ("add", 0, A, 4),
            ("tick",),
            ("end", 0),
            ("cache", "s0", A + (7, 8)),
            ("add", 1, A + (7, 8, 9, 5), 4),
            ("tick",),
        ],
        [
            Plan(admit=(0,), chunks=((0, 0, 12),)),
            Plan(admit=(1,), chunks=((1, 14, 2),), prefixes=((1, "s0", 14, True),)),
        ],
        [()],
    ),
    # a whole prompt held still feeds its last token (its logits): the cached stream is copied
    "whole prompt held": (
        ROOMY,
        [("cache", "s", A + (7,)), ("add", 1, A, 4), ("tick",)],
        [Plan(admit=(1,), chunks=((1, 11, 1),), prefixes=((1, "s", 11, False),))],
        [()],
    ),
    # the least recently used cached stream makes room; the one matched never does
    "eviction": (
        Limits(8, 50, 256, prefix_cache=True),
        [("cache", "a", (1,) * 20), ("cache", "b", (2,) * 20), ("add", 0, (1, 1, 3), 10), ("tick",)],
        [Plan(admit=(0,), chunks=((0, 2, 1),), evict=("b",), prefixes=((0, "a", 2, False),))],
        [(), ()],
    ),
    # the budget needs the room of the stream matched: the request takes it, cut to the match
    "taken for room": (
        Limits(8, 30, 256, prefix_cache=True),
        [("cache", "a", (1,) * 20), ("add", 0, (1, 1, 3), 20), ("tick",)],
        [Plan(admit=(0,), chunks=((0, 2, 1),), prefixes=((0, "a", 2, True),))],
        [()],
    ),
    # rows count too: two cached streams and a request on a pool of two rows
    "rows": (
        Limits(2, 1000, 256, prefix_cache=True),
        [("cache", "a", (1, 2)), ("cache", "b", (3, 4)), ("add", 0, (5, 6), 4), ("tick",)],
        [Plan(admit=(0,), chunks=((0, 0, 2),), evict=("a",))],
        [(), ()],
    ),
    # a stream cached beside requests that reach the whole budget is closed at once, never theirs
    "no room to cache": (
        Limits(8, 20, 256, prefix_cache=True),
        [
            ("add", 0, (1, 2), 8),
            ("add", 1, (3, 4), 8),
            ("tick",),
            ("end", 0),
            ("add", 2, (5, 6), 8),
            ("tick",),
            ("cache", "s0", (1, 2, 9)),
        ],
        [Plan(admit=(0, 1), chunks=((0, 0, 2), (1, 0, 2))), Plan(decode=(1,), admit=(2,), chunks=((2, 0, 2),))],
        [("s0",)],
    ),
    # a cached stream another holds all of goes at once
    "redundant": (
        ROOMY,
        [("cache", "a", (1, 2)), ("cache", "b", (1, 2, 3))],
        [],
        [(), ("a",)],
    ),
    # choices: the first feeds the prompt from the cached start, the others fork from it
    "choices": (
        ROOMY,
        [("cache", "s", A), ("add", 0, B, 4, (1,)), ("tick",)],
        [Plan(admit=(0,), chunks=((0, 10, 1),), forks=((0, (1,)),), prefixes=((0, "s", 10, False),))],
        [()],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_plans(name: str) -> None:
    limits, script, plans, closed = CASES[name]
    assert _run(limits, script) == (plans, closed)


def test_without_the_cache_nothing_is_matched_or_kept() -> None:
    limits = Limits(8, 1000, 8)
    plans, closed = _run(limits, [("add", 0, A, 4), ("add", 1, B, 4), ("tick",), ("cache", "s", A)])
    assert plans == [Plan(admit=(0, 1), chunks=((0, 0, 8),))] and closed == [("s",)]


def test_a_cancelled_feeder_leaves_what_it_fed_to_the_one_waiting() -> None:
    """The request waiting on a prompt being fed goes on when that request ends: from the stream
    cached of it (what it fed), or from nothing."""
    scheduler = Scheduler(Limits(8, 1000, 8, prefix_cache=True))
    scheduler.add(0, len(A), 4, ids=A)
    scheduler.add(1, len(B), 4, ids=B)
    assert scheduler.schedule().admit == (0,)
    scheduler.end(0)
    assert scheduler.cache("s0", A[:8]) == ()
    assert scheduler.schedule() == Plan(admit=(1,), chunks=((1, 8, 3),), prefixes=((1, "s0", 8, True),))

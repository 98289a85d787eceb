"""The generation scheduler alone, with no model: tables of requests added, ticks planned and
requests ended, against the plans each tick must give."""

from __future__ import annotations

import pytest

from ortstate.errors import OrtStateError
from ortstate.scheduler.requests import Limits, Plan, Scheduler


def _run(limits: Limits, script: list[tuple]) -> list[Plan]:
    """``script``: ``("add", rid, prompt, max_new_tokens[, fed[, choices]])``, ``("end", rid)`` or
    ``("tick",)``; the plans of the ticks, in order."""
    scheduler, plans = Scheduler(limits), []
    for op, *args in script:
        if op == "add":
            scheduler.add(*args)
        elif op == "end":
            scheduler.end(*args)
        else:
            plans.append(scheduler.schedule())
    return plans


ROOMY = Limits(rows=8, positions=1000, max_num_batched_tokens=256)

CASES = {
    # every decoding request runs; prompts share the token budget, oldest first, over several ticks
    "chunks oldest first": (
        Limits(8, 1000, 10),
        [("add", 0, 3, 4), ("add", 1, 14, 4), ("add", 2, 5, 4), ("tick",), ("tick",), ("tick",)],
        [
            Plan(admit=(0, 1, 2), chunks=((0, 0, 3), (1, 0, 7))),
            Plan(decode=(0,), chunks=((1, 7, 7), (2, 0, 3))),
            Plan(decode=(0, 1), chunks=((2, 3, 2),)),
        ],
    ),
    # a request that does not fit waits, and so do the ones after it, until one running ends
    "admission by reach": (
        Limits(8, 30, 256),
        [("add", 0, 10, 10), ("add", 1, 10, 5), ("add", 2, 1, 1), ("tick",), ("tick",), ("end", 0), ("tick",)],
        [Plan(admit=(0,), chunks=((0, 0, 10),)), Plan(decode=(0,)), Plan(admit=(1, 2), chunks=((1, 0, 10), (2, 0, 1)))],
    ),
    # rows: a request of two choices takes two; the first request waiting runs when nothing does
    "admission by rows": (
        Limits(2, 1000, 256),
        [("add", 0, 2, 3, 0, (1,)), ("add", 2, 2, 3), ("tick",), ("tick",), ("end", 0), ("end", 1), ("tick",)],
        [
            Plan(admit=(0,), chunks=((0, 0, 2),), forks=((0, (1,)),)),
            Plan(decode=(0, 1)),
            Plan(admit=(2,), chunks=((2, 0, 2),)),
        ],
    ),
    "over the budget alone": (
        Limits(1, 5, 256),
        [("add", 0, 4, 8), ("tick",)],
        [Plan(admit=(0,), chunks=((0, 0, 4),))],
    ),
    # a kept stream's cache holds the start of the prompt: only the rest is fed
    "kept stream": (ROOMY, [("add", 0, 9, 2, 6), ("tick",)], [Plan(admit=(0,), chunks=((0, 6, 3),))]),
    # a prompt that must go whole: one past the budget a tick, in order
    "unchunked": (
        Limits(8, 1000, 10, chunked=False),
        [("add", 0, 30, 1), ("add", 1, 4, 1), ("add", 2, 3, 1), ("tick",), ("tick",)],
        [Plan(admit=(0, 1, 2), chunks=((0, 0, 30),)), Plan(decode=(0,), chunks=((1, 0, 4), (2, 0, 3)))],
    ),
    # a state that takes one token a run once it holds a past
    "stepwise": (
        Limits(8, 1000, 256, stepwise=True),
        [("add", 0, 5, 1, 2), ("add", 1, 3, 1), ("tick",), ("tick",)],
        [Plan(admit=(0, 1), chunks=((0, 2, 1), (1, 0, 3))), Plan(decode=(1,), chunks=((0, 3, 1),))],
    ),
    # a cancelled request's choices that never started end with it; a started one goes on
    "choices end": (
        ROOMY,
        [("add", 0, 2, 3, 0, (1, 2)), ("end", 2), ("tick",), ("end", 0), ("tick",)],
        [Plan(admit=(0,), chunks=((0, 0, 2),), forks=((0, (1,)),)), Plan(decode=(1,))],
    ),
    "a waiting request cancelled": (
        ROOMY,
        [("add", 0, 2, 3), ("add", 1, 2, 3), ("end", 0), ("tick",)],
        [Plan(admit=(1,), chunks=((1, 0, 2),))],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_plans(name: str) -> None:
    limits, script, plans = CASES[name]
    assert _run(limits, script) == plans


def test_a_long_prompt_never_delays_decoding_requests_by_more_than_one_chunk() -> None:
    """A 2,000-token prompt beside 3 decoding requests: every tick until it is fed decodes all 3 and
    feeds at most one chunk of it."""
    scheduler = Scheduler(Limits(8, 10_000, 256))
    for rid in (0, 1, 2):
        scheduler.add(rid, 1, 100)
    scheduler.schedule()
    scheduler.add(9, 2000, 1)
    fed = ticks = 0
    while fed < 2000:
        plan = scheduler.schedule()
        assert plan.decode == (0, 1, 2)
        ((rid, first, count),) = plan.chunks
        assert (rid, first) == (9, fed) and count <= 256
        fed, ticks = fed + count, ticks + 1
    assert ticks == 8  # ceil(2000 / 256)
    assert scheduler.schedule().decode == (0, 1, 2, 9)


def test_the_steady_plan_is_one_object_until_something_changes() -> None:
    """While every request decodes, a tick costs no bookkeeping: the same plan each time."""
    scheduler = Scheduler(ROOMY)
    scheduler.add(0, 2, 5), scheduler.add(1, 3, 5)
    scheduler.schedule()
    steady = scheduler.schedule()
    assert steady is scheduler.schedule() and steady.decode == (0, 1)
    assert scheduler.end(1) == (1,) and scheduler.end(1) == ()
    assert scheduler.schedule().decode == (0,)
    assert (scheduler.waiting, scheduler.running, scheduler.running_ids()) == (0, 1, (0,))


def test_what_cannot_run_is_refused() -> None:
    with pytest.raises(OrtStateError, match="rows must be an integer >= 1, got 0"):
        Limits(0, 10, 10)
    with pytest.raises(OrtStateError, match="request 3: 4 prompt tokens, 4 fed, 2 new: none to run"):
        Scheduler(ROOMY).add(3, 4, 2, 4)

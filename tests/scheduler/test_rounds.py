"""A pool loop's rounds alone: which queued steps and commands run in a round, in which ticks, and
which wait for the next round; and when a round starts."""

from __future__ import annotations

import pytest

from ortstate.scheduler.rounds import ALL, Queued, Round, plan_round, ready


def _step(sid: object) -> Queued:
    return Queued(False, sid)


def _call(sid: object) -> Queued:
    return Queued(True, sid)


CASES = {
    "one tick": ([_step(1), _step(2)], 8, Round([("tick", [0, 1])])),
    "a stream's second step waits": ([_step(1), _step(1), _step(2)], 8, Round([("tick", [0, 2])], [1])),
    "max_batch": ([_step(1), _step(2), _step(3)], 2, Round([("tick", [0, 1])], [2])),
    # a command on a stream stepping in the tick runs after it; one on another stream at once
    "a command after its stream's step": (
        [_step(1), _call(2), _call(1), _step(3)],
        8,
        Round([("call", 1), ("tick", [0]), ("call", 2), ("tick", [3])]),
    ),
    "a command on none": ([_step(1), _call(None)], 8, Round([("call", 1), ("tick", [0])])),
    "ALL after the steps gathered": ([_step(1), _call(ALL)], 8, Round([("tick", [0]), ("call", 1)])),
    # a command behind a step left for the next round waits for it, and so does all after it
    "behind a step left over": (
        [_step(1), _step(1), _call(1), _step(2)],
        8,
        Round([("tick", [0])], [1, 2, 3]),
    ),
    "ALL behind a step left over": ([_step(1), _step(1), _call(ALL)], 8, Round([("tick", [0])], [1, 2])),
    "dropped items": ([Queued(False, 1, True), _step(1), Queued(True, 2, True)], 8, Round([("tick", [1])])),
}


@pytest.mark.parametrize("name", CASES)
def test_rounds(name: str) -> None:
    items, max_batch, want = CASES[name]
    assert plan_round(items, max_batch) == want


@pytest.mark.parametrize(
    ("commands", "stepping", "left", "want"),
    [(0, 1, 0.001, False), (1, 1, 0.001, True), (0, 4, 0.001, True), (0, 1, 0.0, True), (0, 1, -0.5, True)],
)
def test_a_round_starts_once_a_command_waits_the_batch_is_full_or_the_delay_is_over(
    commands: int, stepping: int, left: float, want: bool
) -> None:
    assert ready(commands, stepping, 4, left) is want

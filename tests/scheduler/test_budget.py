"""The KV budget alone: positions counted once, who makes room."""

from __future__ import annotations

import pytest

from ortstate.errors import OrtStateError
from ortstate.scheduler.budget import KvBudget


def test_positions_and_who_makes_room() -> None:
    budget = KvBudget(1000, 10, 40)
    assert (budget.bytes, budget.positions) == (1000, 100)
    assert not budget.over(90, 10) and budget.over(91, 10)
    assert budget.victim([(3.0, 7), (1.5, 2), (2.0, 5)]) == 2  # the least recently stepped
    assert budget.victim([]) is None


@pytest.mark.parametrize("given", [409, 4.1e3, None])
def test_a_budget_that_holds_no_stream_at_max_context_is_refused(given: object) -> None:
    with pytest.raises(
        OrtStateError, match=r"kv_cache_bytes must hold at least one stream at max_context \(40 positions: 410 bytes\)"
    ):
        KvBudget(given, 10, 40)  # type: ignore[arg-type]

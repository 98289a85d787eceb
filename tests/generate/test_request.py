"""A ContinuousBatcher request is complete when built: its choices, kept stream, reuse, sinks and
seeds set by the one function that makes it, none of them patched later (it is frozen)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ortstate.errors import GenerationError
from ortstate.generate.batch_plan import plan_requests
from ortstate.generate.kept import KeptStream
from ortstate.generate.options import SearchOptions


def test_a_request_of_several_choices_is_built_whole() -> None:
    options = SearchOptions.build({}, n=3, do_sample=True, seed=5)
    sinks = [print, repr, str]
    first, *others = plan_requests([10, 11, 12], [1, 2, 3, 4], 6, options, [2], 64, sinks, logprobs=2)
    assert first.siblings == tuple(others) and [r.rid for r in (first, *others)] == [10, 11, 12]
    assert [r.sink for r in (first, *others)] == sinks and all(r.logprobs == 2 and not r.plain for r in others)
    for i, r in enumerate((first, *others)):  # choice i sampled with seed + i
        assert r.rng is not None and r.rng.random() == np.random.default_rng(5 + i).random()
    assert first.stops == frozenset({2}) and first.tokens == [] and first.tokens is not others[0].tokens
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.sink = print  # type: ignore[misc]


def test_a_request_on_a_kept_stream_knows_what_its_cache_holds() -> None:
    kept = KeptStream(4, [1, 2, 3])
    options = SearchOptions.build({})
    (request,) = plan_requests([0], [1, 2, 3, 9], 2, options, (), 64, [print], kept=kept)
    assert (request.kept, request.reused, request.plain) == (kept, 3, True)
    (other,) = plan_requests([1], [5, 2, 3, 9], 2, options, (), 64, [print], kept=kept)
    assert other.reused == 0  # not the cache's start: fed whole from an empty cache
    kept.claim()
    with pytest.raises(GenerationError, match="kept stream 4 is busy with another generation"):
        kept.claim()
    kept.release([1, 2, 3, 9, 7, 8], 5)
    assert (kept.tokens, kept.busy) == ([1, 2, 3, 9, 7], False)
    with pytest.raises(GenerationError, match="reach past the pool's max_context of 8"):
        plan_requests([2], [1] * 6, 3, options, (), 8, [print])

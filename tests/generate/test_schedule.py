"""schedule(): what a tick of continuous batching runs, from the requests' progress alone."""

from __future__ import annotations

from ortstate.generate.schedule import Progress, Tick, schedule


def test_every_decoding_request_runs_and_prompts_share_the_budget_oldest_first() -> None:
    requests = [Progress(0, 0, True), Progress(1, 300, False), Progress(2, 0, True), Progress(3, 40, False)]
    assert schedule(requests, 256) == Tick(decode=(0, 2), chunks=((1, 256),))
    assert schedule(requests, 400) == Tick(decode=(0, 2), chunks=((1, 300), (3, 40)))
    assert schedule([Progress(0, 0, False)], 8).empty


def test_a_long_prompt_never_delays_decoding_streams_by_more_than_one_chunk() -> None:
    """A 2,000-token prompt arrives beside 3 decoding streams: every tick until it is fed decodes
    all 3, and feeds at most one chunk of it."""
    left, ticks = 2000, 0
    while left:
        tick = schedule(
            [Progress(0, 0, True), Progress(1, 0, True), Progress(9, left, False), Progress(2, 0, True)], 256
        )
        assert tick.decode == (0, 1, 2)
        ((rid, count),) = tick.chunks
        assert rid == 9 and count <= 256
        left -= count
        ticks += 1
    assert ticks == 8  # ceil(2000 / 256)


def test_unchunked_prompts_go_whole_one_past_the_budget() -> None:
    requests = [Progress(0, 300, False), Progress(1, 10, False), Progress(2, 5, False)]
    assert schedule(requests, 256, chunked=False).chunks == ((0, 300),)
    assert schedule(requests[1:], 256, chunked=False).chunks == ((1, 10), (2, 5))

"""Which steps of a KV pool share a run, from what each step is and how the model batches."""

from __future__ import annotations

import pytest

from ortstate.scheduler.runs import RAGGED, SINGLE, UNIFORM, Step, one_decode_run, runs_of


def _decode(sid: int, slot: int, past: int, shared: bytes = b"") -> Step:
    return Step(sid, slot, 1, past, past + 1, shared)


CASES = {
    # one-token steps with full masks, any lengths and slots: one ragged run, in slot order
    "ragged decode": ([_decode(0, 5, 3), _decode(1, 2, 9), _decode(2, 3, 1)], RAGGED, False, [(True, [1, 2, 0])]),
    # a uniform model: one run per cache length, split where the slots are not consecutive
    "uniform decode": (
        [_decode(0, 0, 3), _decode(1, 1, 3), _decode(2, 3, 3), _decode(3, 2, 4)],
        UNIFORM,
        False,
        [(False, [0, 1]), (False, [2]), (False, [3])],
    ),
    # a prompt over a past runs alone; fresh prompts of one length together where the model can
    "prompts": (
        [Step(0, 0, 4, 0, 4), Step(1, 1, 4, 0, 4), Step(2, 2, 4, 6, 10), Step(3, 3, 2, 0, 2)],
        RAGGED,
        True,
        [(False, [0, 1]), (False, [2]), (False, [3])],
    ),
    "prompts alone": ([Step(0, 0, 4, 0, 4), Step(1, 1, 4, 0, 4)], RAGGED, False, [(False, [0]), (False, [1])]),
    "single": ([_decode(0, 0, 3), _decode(1, 1, 3)], SINGLE, True, [(False, [0]), (False, [1])]),
    # a value the rows of a run share (cache_position) splits them; a mask of the new token only too
    "shared values": (
        [_decode(0, 0, 3, b"\x03"), _decode(1, 1, 3, b"\x04"), Step(2, 2, 1, 3, 1)],
        RAGGED,
        False,
        [(True, [0]), (True, [1]), (False, [2])],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_runs(name: str) -> None:
    steps, batching, prompts_batch, want = CASES[name]
    assert runs_of(steps, batching, prompts_batch) == want


def test_a_decode_batch_is_one_run_where_the_model_takes_it_ragged() -> None:
    assert one_decode_run(RAGGED, 10, 9)
    assert not one_decode_run(UNIFORM, 10, 9)
    assert not one_decode_run(RAGGED, 1, 9)  # the new token's column only
    assert not one_decode_run(RAGGED, None, 9)

"""The explicit form's KV buffers (``ortstate.runtime.kv_buffers``): a decode step appends its rows
in place, in a buffer with spare rows that grows when full, while every value users see, and every
step's output, is OpenVINO's: through growth, a failed run, a state set from outside, a reset, a
beam reorder and a snapshot."""

from __future__ import annotations

import dataclasses

import numpy as np
import openvino as ov
import pytest
from attention_models import HIDDEN, Spec, save_layer
from oracle import RESET, REWRITTEN, check_steps, open_session

import ortstate
from ortstate.errors import RunError
from ortstate.meta import read_meta, write_meta
from ortstate.runtime import kv_buffers
from ortstate.runtime.store import ShapeRule

RNG = np.random.default_rng(8)


def _feed(batch: int, seq: int, total: int, beam: list[int] | None = None) -> dict[str, np.ndarray]:
    return {
        "x": RNG.standard_normal((batch, seq, HIDDEN)).astype(np.float32),
        "attention_mask": np.ones((batch, total), np.int64),
        "beam_idx": np.array(beam if beam is not None else range(batch), np.int32),
    }


class Spy:
    """Counts the runs the KV buffers took, and the buffers each used."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.taken = 0
        self.buffers: list[int] = []
        run = kv_buffers.KvBuffers.run

        def spied(buffers: kv_buffers.KvBuffers, *args: object) -> list[np.ndarray]:
            out = run(buffers, *args)
            self.taken += 1
            self.buffers.append(next(iter(buffers.buffers.values())).ctypes.data)
            return out

        monkeypatch.setattr(kv_buffers.KvBuffers, "run", spied)


def _fail_once(runner: object) -> None:
    """A run ONNX Runtime refuses (x of the wrong width), on ortstate's side only: nothing changes."""
    if isinstance(runner, ov.InferRequest):
        return
    bad = _feed(1, 1, 2)
    bad["x"] = np.zeros((1, 1, HIDDEN + 1), np.float32)
    with pytest.raises(RunError, match="no variable was changed"):
        runner.run(None, bad)


def _set_cache(runner: object) -> None:
    """Both caches set from outside to 3 rows of 4 heads."""
    for sign, state in zip((1, -1), sorted(runner.query_state(), key=lambda s: s.name)):
        value = sign * np.linspace(-1, 1, 4 * 3 * 8, dtype=np.float32).reshape(1, 4, 3, 8)
        state.state = ov.Tensor(value) if isinstance(runner, ov.InferRequest) else value


def test_decode_appends_in_place_and_matches_openvino(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    xml = save_layer(tmp_path, Spec())
    spy = Spy(monkeypatch)
    prompt = 4
    steps: list = [_feed(1, prompt, prompt)]
    steps += [_feed(1, 1, prompt + i) for i in range(1, 81)]  # past the first buffer's 64 spare rows
    steps += [_fail_once, _feed(1, 1, prompt + 81)]
    check_steps(xml, steps, forms=(True, REWRITTEN))
    decode = 81
    assert spy.taken == 2 * decode, "every decode step took the KV buffers, in both explicit sessions"
    one_session = spy.buffers[:decode]
    moves = sum(a != b for a, b in zip(one_session, one_session[1:]))
    assert moves == 1, f"the buffer is replaced once, when its spare rows run out (seen {moves})"


def test_set_state_reset_beams_and_continuation_fall_back_exactly(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    xml = save_layer(tmp_path, Spec(heads=4, kv_heads=4))
    spy = Spy(monkeypatch)
    steps = [_feed(2, 3, 3), _feed(2, 1, 4), _feed(2, 1, 5, beam=[1, 0]), _feed(2, 1, 6), _feed(2, 2, 8)]
    steps += [RESET, _feed(1, 3, 3), _set_cache, _feed(1, 1, 4), _feed(1, 1, 5), _feed(1, 3, 8), _feed(1, 1, 9)]
    check_steps(xml, steps, forms=(True,))
    # in place: the decode steps whose beam_idx is the identity (after set_state too, from a copy of
    # the value set) and the batch-1 continuation; not the prefills, the beam swap, nor the batch of
    # 2 continuing with 2 rows (the general path ran them)
    assert spy.taken == 6


def test_snapshot_of_a_buffered_cache(tmp_path) -> None:
    xml = save_layer(tmp_path, Spec())
    first = open_session(xml, True)
    feeds = [_feed(1, 3, 3)] + [_feed(1, 1, 3 + i) for i in range(1, 6)]
    for feed in feeds[:4]:
        first.run(None, feed)
    path = tmp_path / "state.npz"
    first.save_state(path)
    second = open_session(xml, True)
    second.load_state(path)
    for feed in feeds[4:]:
        want, got = first.run(None, feed), second.run(None, feed)
        np.testing.assert_array_equal(got[0], want[0])
    for a, b in zip(first.query_state(), second.query_state()):
        assert a.name == b.name and a.state.shape == (1, 2, 8, 8)
        np.testing.assert_array_equal(a.state, b.state)


def test_a_snapshot_loaded_over_live_buffers_is_what_runs_next(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The buffers stay bound between steps and are taken again only when the store changed: a
    state loaded into a session whose buffers hold a longer cache is what its next step reads."""
    xml = save_layer(tmp_path, Spec())
    spy = Spy(monkeypatch)
    session = open_session(xml, True)
    feeds = [_feed(1, 3, 3)] + [_feed(1, 1, 3 + i) for i in range(1, 8)]
    for feed in feeds[:3]:
        session.run(None, feed)
    path = tmp_path / "early.npz"
    session.save_state(path)
    for feed in feeds[3:6]:  # the buffers move on past the snapshot
        session.run(None, feed)
    fresh = open_session(xml, True)
    fresh.load_state(path)
    session.load_state(path)
    taken = spy.taken
    for feed in feeds[3:]:
        np.testing.assert_array_equal(session.run(None, feed)[0], fresh.run(None, feed)[0])
    assert spy.taken == taken + 2 * len(feeds[3:]), "both sessions' steps took their KV buffers"
    for a, b in zip(session.query_state(), fresh.query_state()):
        np.testing.assert_array_equal(a.state, b.state)


def test_a_cache_grown_past_its_declared_bound_is_refused_as_on_the_general_path(tmp_path, monkeypatch) -> None:
    """A variable whose shape bounds its cache length (``[?,2,0..5,8]``): the step that would make it
    6 long raises and changes nothing, on the KV buffers as on the general path (forced)."""
    model = ortstate.convert(save_layer(tmp_path, Spec()), explicit_state=True)
    meta = read_meta(model)
    bounded = [dataclasses.replace(v, shape=[v.shape[0], v.shape[1], [0, 5], v.shape[3]]) for v in meta.variables]
    write_meta(model, dataclasses.replace(meta, variables=tuple(bounded)))
    feeds = [_feed(1, 3, 3), _feed(1, 1, 4), _feed(1, 1, 5), _feed(1, 1, 6)]
    results = []
    for buffered in (True, False):
        if not buffered:
            monkeypatch.setattr(kv_buffers.KvBuffers, "run", lambda *_: (_ for _ in ()).throw(kv_buffers.KvMiss))
        session = ortstate.StatefulSession(model)
        outs = [session.run(None, feed)[0] for feed in feeds[:3]]
        with pytest.raises(RunError, match="no variable was changed"):
            session.run(None, feeds[3])
        assert [s.state.shape for s in session.query_state()] == [(1, 2, 5, 8)] * 2
        results.append(outs)
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_a_shape_rule_says_which_lengths_it_admits() -> None:
    rule = ShapeRule([[1, None], 2, [0, 5], 8])
    assert rule.lengths((1, 2, 99, 8), 2) == (0, 5)
    assert rule.lengths((1, 3, 99, 8), 2) is None  # another static dim differs
    assert rule.lengths((0, 2, 99, 8), 2) is None  # the batch's bound 1.. is not met
    assert rule.lengths((1, 2, 8), 2) is None  # another rank
    assert rule.lengths((1, 2, 3, 8), 1) == (2, 2)  # a static dim admits its size alone
    assert ShapeRule(None).lengths((1,), 0) == (0, float("inf"))
    assert all(rule.admits((1, 2, n, 8)) == (n <= 5) for n in range(8))

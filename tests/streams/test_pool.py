"""StreamPool against lone streams: each pool stream gives what the same stream gives alone in a
StatefulSession request (itself tested against OpenVINO), through random interleavings of steps,
resets, closes, re-opened slots, parks, saves and loads, in the explicit form the pool runs."""

from __future__ import annotations

import asyncio
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from oracle import REPO, save_ir, variable

import ortstate
from ortstate.errors import PoolFullError, RunError, StateError

# Batched kernels round differently from batch 1: equal up to that (the 1e-6 relative).
RTOL, ATOL = 1e-6, 1e-6
RECURRENT = [
    "lstm_1l",
    "lstm_2l_dynbatch",
    "lstm_2l_f16",
    "gru_1l",
    "gru_2l",
    "rnn_2l_relu",
    "lstmcell_step",
    "grucell_step",
    "ti_lowlatency_const",  # TensorIterator and Loop bodies after LowLatency2: their batch followed
    "ti_lowlatency_param",
    "loop_lowlatency_const",
    "loop_lowlatency_param",
]


def _model(name: str) -> Path:
    return REPO / "models" / name / "model.xml"


class Lone:
    """The oracle: one StatefulSession request per stream."""

    def __init__(self, model: Any, pool: ortstate.StreamPool) -> None:
        self.session = ortstate.StatefulSession(model)
        self.pool = pool
        self.requests: dict[int, Any] = {}

    def start(self, sid: int, request: Any = None) -> None:
        request = request or self.session.create_infer_request()
        self.requests[sid] = request
        for spec, var in zip(self.pool.layout.states, request.query_state()):
            if 0 in var.state.shape:  # a dynamic batch starts empty: a stream starts at zeros of one row
                var.state = np.zeros(spec.shape, spec.dtype)

    def reset(self, sid: int) -> None:
        self.requests[sid].reset_state()
        self.start(sid, self.requests[sid])

    def step(self, sid: int, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.requests[sid].infer(feeds)

    def states(self, sid: int) -> dict[str, np.ndarray]:
        return {v.name: v.state for v in self.requests[sid].query_state()}


def _feeds(pool: ortstate.StreamPool, rng: np.random.Generator, time: int) -> dict[str, np.ndarray]:
    out = {}
    for spec in pool.layout.inputs:
        shape = [time if d is None else d for d in spec.dims]
        out[spec.name] = rng.normal(0, 1, shape).astype(spec.dtype)
    return out


def _close(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> None:
    assert got.keys() == want.keys(), what
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=f"{what}: {name}")


def _states_of(pool: ortstate.StreamPool, lone: Lone, sid: int, tmp: Path) -> dict[str, np.ndarray]:
    """A pool stream's variables, read through its snapshot loaded into a lone request."""
    path = tmp / f"check-{sid}.npz"
    pool.save(sid, path)
    request = lone.session.create_infer_request()
    request.load_state(path)
    return {v.name: v.state for v in request.query_state()}


@pytest.mark.parametrize("name", RECURRENT)
def test_random_interleavings_equal_lone_streams(name: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    pool = ortstate.StreamPool(_model(name), slots=5, park_dir=tmp_path / "parked")
    lone = Lone(_model(name), pool)
    dynamic_time = any(None in s.dims for s in pool.layout.inputs)
    for _ in range(3):
        lone.start(pool.open())
    for tick in range(40):
        sids = pool.streams
        action = rng.integers(10)
        if action == 0 and len(sids) < pool.slots:
            lone.start(pool.open())
        elif action == 1 and sids:
            sid = int(rng.choice(sids))
            pool.close(sid)
            del lone.requests[sid]
        elif action == 2 and sids:
            sid = int(rng.choice(sids))
            pool.reset(sid)
            lone.reset(sid)
        elif action == 3 and sids:
            pool.park(int(rng.choice(sids)))
        elif action == 4 and sids and len(sids) < pool.slots:
            sid = int(rng.choice(sids))
            pool.save(sid, tmp_path / "s.npz")
            copy = pool.load(tmp_path / "s.npz")
            request = lone.session.create_infer_request()
            request.load_state(tmp_path / "s.npz")
            lone.start(copy, request)
        stepping = [int(s) for s in pool.streams if rng.random() < 0.7]
        # two time lengths at once where the model has a time axis: two runs, one per shape
        feeds = {s: _feeds(pool, rng, int(rng.integers(1, 3)) if dynamic_time else 1) for s in stepping}
        got = pool.step(feeds)
        assert got.keys() == set(stepping)
        for sid in stepping:
            _close(got[sid], lone.step(sid, feeds[sid]), f"tick {tick} stream {sid}")
    for sid in pool.streams:
        _close(_states_of(pool, lone, sid, tmp_path), lone.states(sid), f"stream {sid} variables")
    stats = pool.stats()
    assert stats.max_batch > 1 and stats.streams == len(lone.requests)


def _computed_init(tmp_path: Path) -> Path:
    """A static-batch IR (batch 1) whose variable's init reads an input: s starts at 2*h0, then
    s = s + x each step, out = tanh(s)."""
    x = ops.parameter([1, 4], np.float32, name="x")
    h0 = ops.parameter([1, 4], np.float32, name="h0")
    var = variable("s", [1, 4])
    read = ops.read_value(ops.multiply(h0, ops.constant(np.float32(2))), var)
    new = ops.add(read, x)
    out = ops.tanh(new)
    out.get_output_tensor(0).set_names({"out"})
    model = ov.Model([ops.result(out)], [ops.assign(new, var)], [x, h0], "computed_init")
    return save_ir(model, tmp_path)


def _pinned(tmp_path: Path) -> Path:
    """A batch-1 IR whose state passes a Reshape to the constant shape [1, 4]: the batch is pinned."""
    x = ops.parameter([1, 4], np.float32, name="x")
    var = variable("s", [1, 4])
    read = ops.read_value(ops.constant(np.zeros((1, 4), np.float32)), var)
    flat = ops.reshape(ops.add(read, x), ops.constant(np.array([1, 4], np.int64)), False)
    flat.set_friendly_name("pin")
    model = ov.Model([ops.result(flat)], [ops.assign(flat, var)], [x], "pinned")
    return save_ir(model, tmp_path)


def test_per_stream_init_is_computed_row_by_row(tmp_path: Path) -> None:
    xml = _computed_init(tmp_path)
    pool = ortstate.StreamPool(xml, slots=4)
    lone = Lone(xml, pool)
    rng = np.random.default_rng(3)
    feeds = lambda: {"x": rng.normal(size=(1, 4)).astype(np.float32), "h0": rng.normal(size=(1, 4)).astype(np.float32)}  # noqa: E731
    a, b = pool.open(), pool.open()
    lone.start(a), lone.start(b)
    for tick in range(6):
        if tick == 2:
            c = pool.open()  # fresh next to stepped streams: its init is computed, theirs not recomputed
            lone.start(c)
        if tick == 4:
            pool.reset(a)
            lone.reset(a)
        given = {sid: feeds() for sid in pool.streams}
        got = pool.step(given)
        for sid, f in given.items():
            _close(got[sid], lone.step(sid, f), f"tick {tick} stream {sid}")


def test_a_constant_pinning_the_batch_is_refused_naming_the_layer(tmp_path: Path) -> None:
    with pytest.raises(ortstate.OrtStateError, match=r"cannot batch streams.*layer 'pin' \(id \d+, Reshape-1\)"):
        ortstate.StreamPool(_pinned(tmp_path), slots=2)


def test_a_bad_feed_is_its_streams_error(tmp_path: Path) -> None:
    pool = ortstate.StreamPool(_model("lstm_1l"), slots=3)
    lone = Lone(_model("lstm_1l"), pool)
    rng = np.random.default_rng(5)
    a, b = pool.open(), pool.open()
    lone.start(a), lone.start(b)
    good = _feeds(pool, rng, 2)
    bad = {"x": good["x"].astype(np.float64)}
    with pytest.raises(RunError, match=r"^stream 1: input 'x': dtype float64, expected float32$"):
        pool.step({a: good, b: bad})
    wrong = {"x": np.zeros((2, 2, 8), np.float32)}
    with pytest.raises(RunError, match=r"stream 1: input 'x': shape \[2, 2, 8\], expected \[1,\?,8\]"):
        pool.step({b: wrong})
    with pytest.raises(StateError, match="stream 9 is not open"):
        pool.step({9: good})
    # nothing stepped above; now the bad stream's error comes back in its place and the other steps
    got = pool.step({a: good, b: bad}, errors="return")
    assert isinstance(got[b], RunError)
    _close(got[a], lone.step(a, good), "stream a")
    again = _feeds(pool, rng, 1)
    _close(pool.step({b: again})[b], lone.step(b, again), "stream b, never stepped by the bad feed")


def test_a_full_pool_refuses_and_evicts_nothing(tmp_path: Path) -> None:
    pool = ortstate.StreamPool(_model("gru_1l"), slots=2, park_dir=tmp_path)
    a, b = pool.open(), pool.open()
    with pytest.raises(PoolFullError, match="cannot open a stream: all 2 slots are taken"):
        pool.open()
    pool.save(a, tmp_path / "a.npz")
    with pytest.raises(PoolFullError, match="cannot load a stream"):
        pool.load(tmp_path / "a.npz")
    pool.park(a)
    c = pool.open()  # a's slot
    feeds = {"x": np.ones((1, 1, 8), np.float32)}
    with pytest.raises(PoolFullError, match=f"cannot resume parked stream {a}"):
        pool.step({a: feeds})
    pool.close(c)
    assert pool.step({a: feeds, b: feeds}).keys() == {a, b}
    assert pool.streams == [a, b]


def test_snapshots_of_other_models_or_several_streams_are_refused(tmp_path: Path) -> None:
    pool = ortstate.StreamPool(_model("lstm_2l_dynbatch"), slots=2)
    other = ortstate.StatefulSession(_model("gru_1l"))
    other.save_state(tmp_path / "gru.npz")
    with pytest.raises(StateError, match="fingerprint mismatch"):
        pool.load(tmp_path / "gru.npz")
    session = ortstate.StatefulSession(_model("lstm_2l_dynbatch"))
    for var in session.query_state():
        var.state = np.zeros((2, 3, 16), np.float32)  # a lone session of batch 3
    session.save_state(tmp_path / "three.npz")
    with pytest.raises(StateError, match=r"variable 'h_inh_out' has shape \[2, 3, 16\]; one stream's is \[2, 1, 16\]"):
        pool.load(tmp_path / "three.npz")
    assert pool.streams == []


def test_submit_batches_concurrent_streams_per_tick() -> None:
    pool = ortstate.StreamPool(_model("lstmcell_step"), slots=8, max_batch=8, max_delay=0.05)
    lone = Lone(_model("lstmcell_step"), pool)
    rng = np.random.default_rng(11)
    sids = [pool.open() for _ in range(6)]
    for sid in sids:
        lone.start(sid)
    plan = {sid: [_feeds(pool, rng, 1) for _ in range(4)] for sid in sids}

    async def stream(sid: int) -> list[dict[str, np.ndarray]]:
        return [await pool.submit(sid, f) for f in plan[sid]]

    async def everything() -> list:
        # one stream submits two steps at once: the second waits for the next tick
        twice = asyncio.gather(pool.submit(sids[0], plan[sids[0]][0]), pool.submit(sids[0], plan[sids[0]][1]))
        bad = pool.submit(sids[1], {"x": np.zeros((1, 3), np.float32)})
        return await asyncio.gather(twice, asyncio.gather(bad, return_exceptions=True), *map(stream, sids[1:]))

    twice, (bad,), *rest = asyncio.run(everything())
    assert isinstance(bad, RunError) and "stream 1" in str(bad)
    for k, f in enumerate(plan[sids[0]][:2]):
        _close(twice[k], lone.step(sids[0], f), f"stream {sids[0]} step {k}")
    for sid, outs in zip(sids[1:], rest):
        for k, (f, got) in enumerate(zip(plan[sid], outs)):
            _close(got, lone.step(sid, f), f"stream {sid} step {k}")
    stats = pool.stats()
    assert stats.max_batch >= 5 and stats.runs <= 6 and stats.tick_p50 > 0


def test_steps_waiting_when_a_tick_ends_run_at_once() -> None:
    """Continuous batching: with a delay of 0.5 s, a stream's three steps submitted at once take
    three ticks, and only the first waits for the delay (waiting for each: 1.5 s)."""
    pool = ortstate.StreamPool(_model("lstmcell_step"), slots=2, max_delay=0.5)
    lone = Lone(_model("lstmcell_step"), pool)
    rng = np.random.default_rng(13)
    sid = pool.open()
    lone.start(sid)
    plan = [_feeds(pool, rng, 1) for _ in range(3)]

    async def everything() -> tuple[list, float]:
        start = time.perf_counter()
        got = await asyncio.gather(*(pool.submit(sid, f) for f in plan))
        return got, time.perf_counter() - start

    got, seconds = asyncio.run(everything())
    assert pool.stats().runs == 3 and 0.5 <= seconds < 0.9, seconds
    for k, f in enumerate(plan):
        _close(got[k], lone.step(sid, f), f"step {k}")


def test_a_failed_run_changes_no_stream(monkeypatch) -> None:
    """A step whose second run fails (two time lengths: two runs) raises and commits neither run."""
    pool = ortstate.StreamPool(_model("lstm_1l"), slots=2)
    lone = Lone(_model("lstm_1l"), pool)
    rng = np.random.default_rng(9)
    a, b = pool.open(), pool.open()
    lone.start(a), lone.start(b)
    run, calls = pool.loaded.fast.run, []

    def second_fails(*args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : injected")
        return run(*args)

    monkeypatch.setattr(pool.loaded.fast, "run", second_fails)
    with pytest.raises(RunError, match=r"^streams 1: run failed, no variable was changed: 1 : FAIL : injected$"):
        pool.step({a: _feeds(pool, rng, 1), b: _feeds(pool, rng, 2)})
    assert len(calls) == 2
    monkeypatch.setattr(pool.loaded.fast, "run", run)
    feeds = {a: _feeds(pool, rng, 2), b: _feeds(pool, rng, 2)}
    got = pool.step(feeds)
    for sid in (a, b):
        _close(got[sid], lone.step(sid, feeds[sid]), f"stream {sid} after the failed step")


def test_state_memory_is_slots_times_one_stream_and_steps_allocate_nothing_that_stays() -> None:
    pool = ortstate.StreamPool(_model("gru_2l"), slots=16)
    one = sum(int(np.prod(s.shape)) * s.carrier.itemsize for s in pool.layout.states)
    assert pool.stats().state_bytes == 16 * one
    sids = [pool.open() for _ in range(3)]
    rng = np.random.default_rng(4)
    feeds = [{sid: _feeds(pool, rng, 1) for sid in sids[:k]} for k in (1, 2, 3)]  # three batch sizes
    for f in feeds * 1400:  # every shape bound, the stats' latency windows (4,096 runs) full
        pool.step(f)
    tracemalloc.start()
    try:
        for f in feeds * 100:
            pool.step(f)
        before = tracemalloc.get_traced_memory()[0]
        for f in feeds * 2000:
            pool.step(f)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes more after 6,000 more steps"


def test_submit_does_not_block_the_event_loop_during_a_run(monkeypatch) -> None:
    """The batched step waits until another coroutine has run ten times: it only can if the step
    runs off the event loop's thread."""
    pool = ortstate.StreamPool(_model("lstmcell_step"), slots=4, max_batch=2, max_delay=0.001)
    lone = Lone(_model("lstmcell_step"), pool)
    rng = np.random.default_rng(12)
    a, b = pool.open(), pool.open()
    lone.start(a), lone.start(b)
    step, running, beaten = pool.step, threading.Event(), threading.Event()
    waited = []

    def waiting_step(*args, **kwargs):
        running.set()
        waited.append(beaten.wait(5))
        return step(*args, **kwargs)

    monkeypatch.setattr(pool, "step", waiting_step)
    fa, fb = _feeds(pool, rng, 1), _feeds(pool, rng, 1)

    async def beats() -> None:
        while not running.is_set():
            await asyncio.sleep(0.001)
        for _ in range(10):
            await asyncio.sleep(0)
        beaten.set()

    async def everything() -> list:
        return await asyncio.gather(pool.submit(a, fa), pool.submit(b, fb), beats())

    got_a, got_b, _ = asyncio.run(everything())
    assert waited == [True]
    _close(got_a, lone.step(a, fa), "stream a")
    _close(got_b, lone.step(b, fb), "stream b")


def test_a_planned_step_checks_each_streams_feeds_and_keeps_streams_exact(monkeypatch, tmp_path: Path) -> None:
    """The same streams stepping again run by their plan (no InferenceSession.run), in consecutive
    slots and not; a feed that does not fit the plan is still that stream's error and changes no
    stream; closing or parking a planned stream drops the plan."""
    pool = ortstate.StreamPool(_model("lstm_1l"), slots=6, park_dir=tmp_path)
    lone = Lone(_model("lstm_1l"), pool)
    rng = np.random.default_rng(21)
    sids = [pool.open() for _ in range(5)]
    for sid in sids:
        lone.start(sid)
    pool.close(sids[1])  # slots 0, 2, 3: not consecutive; 3, 4: consecutive; 0 alone
    del lone.requests[sids[1]]
    batches = [(sids[0], sids[2], sids[3]), (sids[3], sids[4]), (sids[0],)]
    run, general = pool.loaded.fast.run, []
    monkeypatch.setattr(pool.loaded.fast, "run", lambda *a: general.append(1) or run(*a))

    def check(batch: tuple, what: str, bad: dict | None = None) -> None:
        feeds = {sid: _feeds(pool, rng, 1) for sid in batch}
        feeds.update(bad or {})
        got = pool.step(feeds, errors="return")
        for sid in batch:
            if sid in (bad or {}):
                assert isinstance(got[sid], RunError) and str(got[sid]).startswith(f"stream {sid}: "), what
            else:
                _close(got[sid], lone.step(sid, feeds[sid]), f"{what}: stream {sid}")

    for tick in range(3):
        for batch in batches:
            check(batch, f"tick {tick}")
    assert len(general) == len(batches)  # one general run per batch shape, the rest planned
    x = _feeds(pool, rng, 1)["x"]
    for what, value in [
        ("float64", {"x": x.astype(np.float64)}),
        ("two rows", {"x": np.concatenate([x, x])}),
        ("unknown input", {"x": x, "y": x}),
        ("a list", {"x": x.tolist()}),
        ("another byte order", {"x": x.astype(">f4")}),
    ]:
        for batch in batches:
            check(batch, what, {batch[-1]: value})
            check(batch, f"after {what}")
    # rows that add up to the batch's: each is still its stream's error
    check(batches[1], "zero and two rows", {batches[1][0]: {"x": x[:0]}, batches[1][1]: {"x": np.concatenate([x, x])}})
    check(batches[1], "after zero and two rows")
    with pytest.raises(RunError, match=rf"^stream {sids[2]}: input 'x': dtype float64"):
        pool.step({sids[0]: _feeds(pool, rng, 1), sids[2]: {"x": x.astype(np.float64)}, sids[3]: _feeds(pool, rng, 1)})
    check(batches[0], "after a raised step")
    pool.park(sids[3])
    check(batches[1], "stream 3 resumed")
    check(batches[0], "stream 3 in its new slot")
    pool.close(sids[0])
    with pytest.raises(StateError, match=f"stream {sids[0]} is not open"):
        pool.step({sid: _feeds(pool, rng, 1) for sid in batches[0]})
    for sid in pool.streams:
        _close(_states_of(pool, lone, sid, tmp_path), lone.states(sid), f"stream {sid} variables")


def test_an_empty_feed_a_kernel_cannot_take_is_refused_as_alone() -> None:
    """A TensorIterator IR (batched since its loop body was made legible) refuses a step of no time
    steps as a lone session does, for that stream only."""
    pool = ortstate.StreamPool(_model("ti_lowlatency_param"), slots=2)
    lone = Lone(_model("ti_lowlatency_param"), pool)
    rng = np.random.default_rng(13)
    a, b = pool.open(), pool.open()
    lone.start(a), lone.start(b)
    empty = {**_feeds(pool, rng, 1), "x": np.zeros((1, 0, 8), np.float32)}
    with pytest.raises(RunError) as alone:
        lone.step(b, empty)
    good = _feeds(pool, rng, 2)
    got = pool.step({a: good, b: empty}, errors="return")
    assert isinstance(got[b], RunError) and str(got[b]) == f"stream {b}: {alone.value}"
    _close(got[a], lone.step(a, good), "the other stream")
    again = _feeds(pool, rng, 3)
    _close(pool.step({b: again})[b], lone.step(b, again), "the refused stream, unchanged")

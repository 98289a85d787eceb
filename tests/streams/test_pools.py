"""Both pools are a ``Pool``: every member of the protocol, run on a pool of each kind that
``StreamPool(model)`` opens (a recurrent net's SlotPool, a decoder's KvPool), means the same on
both: each stream's outputs and variables are what a lone ``StatefulSession`` request fed the same
gives, through values/restore/put, save/load, reset, park, close, submit and call."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from oracle import REPO

import ortstate
from ortstate.decoders import input_specs
from ortstate.decoders.feeds import FeedRules
from ortstate.decoders.model_dir import read_config
from ortstate.errors import OrtStateError, StateError
from ortstate.runtime import LoadedModel
from ortstate.streams import KvPool, Pool, PoolStats, SlotPool
from ortstate.streams.loop import PoolLoop

LSTM = REPO / "models" / "lstm_2l_dynbatch" / "model.xml"
LLAMA = REPO / "models" / "llm" / "llama"
TOLERANCE = 1e-5  # a batched kernel rounds differently from batch 1


@dataclass
class Kind:
    """How to feed one kind of model's streams, and its lone request at a fresh stream's state."""

    model: Path
    cls: type
    feeds: Callable[[np.random.Generator, int], dict[str, np.ndarray]]  # one step's, after ``past`` positions
    fresh: Callable[[Any], None]  # makes a new lone request hold what a new stream holds


def _lstm(pool: Any) -> Kind:
    def feeds(rng: np.random.Generator, past: int) -> dict[str, np.ndarray]:
        return {
            s.name: rng.normal(0, 1, [1 if d is None else d for d in s.dims]).astype(s.dtype)
            for s in pool.layout.inputs
        }

    def fresh(request: Any) -> None:  # a dynamic batch starts empty; a pool's stream at zeros of one row
        for spec, var in zip(pool.layout.states, request.query_state()):
            var.state = np.zeros(spec.shape, spec.dtype)

    return Kind(LSTM, SlotPool, feeds, fresh)


def _llama(pool: Any) -> Kind:
    session = ortstate.StatefulSession(pool.loaded.origin)
    rules = FeedRules.for_model(input_specs(session.get_inputs()), read_config(LLAMA))

    def feeds(rng: np.random.Generator, past: int) -> dict[str, np.ndarray]:
        return rules.feeds(rng.integers(1, 200, (1, 1 if past else 3)), past)

    return Kind(LLAMA / "openvino_model.xml", KvPool, feeds, lambda request: None)


KINDS = {"slot": (LSTM, _lstm, {}), "kv": (LLAMA / "openvino_model.xml", _llama, {"max_context": 64})}
# (Python 3.10's onnxruntime runs no LLM export: see tests/conftest.py)
ON_310 = pytest.mark.skipif(sys.version_info < (3, 11), reason="onnxruntime 1.23 (Python 3.10) runs no LLM export")


class Seen:
    """The pool, recording which of its members the test reaches."""

    def __init__(self, pool: Any) -> None:
        object.__setattr__(self, "pool", pool)
        object.__setattr__(self, "names", set())

    def __getattr__(self, name: str) -> Any:
        self.names.add(name)
        return getattr(self.pool, name)


class Lone:
    """One lone request per stream of the pool, and how many positions each has been fed."""

    def __init__(self, kind: Kind, tmp: Path) -> None:
        self.kind, self.tmp = kind, tmp
        self.session = ortstate.StatefulSession(kind.model)
        self.requests: dict[int, Any] = {}
        self.past: dict[int, int] = {}

    def start(self, sid: int) -> None:
        self.requests[sid] = self.session.create_infer_request()
        self.kind.fresh(self.requests[sid])
        self.past[sid] = 0

    def copy(self, sid: int, source: int) -> None:
        path = self.tmp / f"lone-{source}.npz"
        self.requests[source].save_state(path)
        self.requests[sid] = self.session.create_infer_request()
        self.requests[sid].load_state(path)
        self.past[sid] = self.past[source]


def _step(pool: Any, lone: Lone, sids: list[int], rng: np.random.Generator) -> None:
    """Step ``sids`` once in one pool step; each equal to its lone request's step."""
    feeds = {sid: lone.kind.feeds(rng, lone.past[sid]) for sid in sids}
    got = pool.step(feeds)
    for sid in sids:
        want = lone.requests[sid].infer(feeds[sid])
        _close(got[sid], want, f"stream {sid}")
        lone.past[sid] += feeds[sid]["input_ids"].shape[1] if "input_ids" in feeds[sid] else 1


def _close(got: dict[str, np.ndarray], want: dict[str, np.ndarray], where: str) -> None:
    assert got.keys() == want.keys(), where
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=TOLERANCE, atol=TOLERANCE, err_msg=f"{where}: {name}")


def _same_values(pool: Any, lone: Lone, sid: int) -> None:
    """Stream ``sid``'s values, by the pool's variable order, against its lone request's."""
    want = {v.name: v.state for v in lone.requests[sid].query_state()}
    got = dict(zip(pool.variables, pool.values(sid)))
    assert got.keys() == want.keys()
    for name, value in got.items():
        assert value is not None, name
        np.testing.assert_allclose(value, want[name], rtol=TOLERANCE, atol=TOLERANCE, err_msg=name)


def _protocol_members() -> set[str]:
    return {n for n in vars(Pool) if not n.startswith("_")} | set(Pool.__annotations__)


@pytest.mark.parametrize("kind_name", [pytest.param(k, marks=ON_310 if k == "kv" else ()) for k in KINDS])
def test_every_member_of_the_protocol_means_the_same_on_both_pools(kind_name: str, tmp_path: Path) -> None:
    model, make_kind, options = KINDS[kind_name]
    real = ortstate.StreamPool(model, slots=4, park_dir=tmp_path / "parked", **options)
    kind = make_kind(real)
    assert type(real) is kind.cls and isinstance(real, Pool)
    pool, lone, rng = Seen(real), Lone(kind, tmp_path), np.random.default_rng(5)
    assert pool.slots == 4 and isinstance(pool.loaded, LoadedModel) and isinstance(pool.worker, PoolLoop)

    a, b = pool.open(), pool.open()
    lone.start(a), lone.start(b)
    for sids in ([a, b], [a, b], [a]):
        _step(pool, lone, sids, rng)
    _same_values(pool, lone, a)

    c = pool.restore(pool.values(a))  # values -> restore: a copy of a
    lone.copy(c, a)
    pool.put(b, pool.values(a))  # b now holds what a holds
    lone.copy(b, a)
    pool.save(a, tmp_path / "a.npz")
    d = pool.load(tmp_path / "a.npz")
    lone.copy(d, a)
    assert pool.streams == sorted([a, b, c, d])
    _step(pool, lone, [a, b, c, d], rng)
    _same_values(pool, lone, d)

    pool.reset(c)
    lone.start(c)
    pool.park(a)
    assert pool.stats().parked >= 1
    _step(pool, lone, [a, c], rng)  # a comes back from its file
    assert sorted(pool.park_idle(0.0)) == sorted([a, b, c, d])
    _step(pool, lone, [b, d], rng)

    pool.close(d)
    assert d not in pool.streams
    with pytest.raises(StateError, match=f"stream {d} is not open"):
        pool.step({d: kind.feeds(rng, 0)})

    async def through_the_loop() -> tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]:
        e = await pool.call(pool.open)
        lone.start(e)
        feeds = kind.feeds(rng, 0)
        return e, feeds, await pool.submit(e, feeds)

    e, feeds, got = asyncio.run(through_the_loop())
    _close(got, lone.requests[e].infer(feeds), f"stream {e}, submitted")

    stats = pool.stats()
    assert isinstance(stats, PoolStats) and (stats.streams, stats.slots) == (4, 4) and stats.runs > 0
    assert _protocol_members() <= pool.names, sorted(_protocol_members() - pool.names)


def test_the_factory_chooses_by_the_variables_and_the_pools_share_no_class() -> None:
    assert not issubclass(KvPool, SlotPool) and not issubclass(SlotPool, KvPool)
    assert {"open", "step", "values", "restore", "put", "park", "call"} <= _protocol_members()
    with pytest.raises(OrtStateError, match="kv_cache_bytes and max_context apply to a decoder with KV caches"):
        ortstate.StreamPool(LSTM, slots=2, max_context=64)

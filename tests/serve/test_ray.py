"""ortstate serve on Ray Serve, on this machine's Ray (127.0.0.1): streams routed by id over two
replicas that share a state directory; while clients step, one replica is removed in place (a
declarative config scaled down) or both are replaced by one (``serve.run`` again), and every stream
continues exactly on the replica left."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from conftest import (
    MODEL,
    Lone,
    assert_same,
    durable_streams_survive,
    feeds,
    ray_on_this_machine,
    serving,
    until_both_servers_take_streams,
)
from ray import serve

from ortstate.errors import ServeError
from ortstate.serve import Client, ServeConfig
from ortstate.serve.streams.ray_deployment import make_app

STREAMS = 12


def test_the_command_parks_every_stream_on_sigterm_and_exits_0(tmp_path):
    """``ortstate serve --ray`` (its own local Ray): a client still connected at SIGTERM; the process
    exits 0 with the stream parked where a lone session loads it and continues exactly."""
    ray = ("--ray", "--state-dir", str(tmp_path), "--handoff", "1")
    with serving(*ray, timeout=120, then=r"\(Ray Serve, 2 replicas") as (proc, url):
        rng, lone = np.random.default_rng(21), Lone()
        stream = Client(url).open()
        for _ in range(3):
            fed = feeds(rng)
            assert_same(stream.step(fed), lone.step(fed))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0 and out.splitlines()[-1] == f"ortstate serve: stopped; streams parked in {tmp_path}"
    assert [p.name for p in tmp_path.iterdir()] == [f"{stream.id}.npz"]
    restored = Lone()
    restored.request.load_state(tmp_path / f"{stream.id}.npz")
    fed = feeds(rng)
    assert_same(restored.step(fed), lone.step(fed), "the parked stream, continued alone")


@pytest.fixture(scope="module")
def local_ray():
    """Ray on this machine for the module."""
    with ray_on_this_machine() as url:
        yield url


def _replicas() -> dict:
    return dict(serve.status().applications["ortstate"].deployments["ortstate"].replica_states)


def _survive(url: str, tmp_path, rescale, seed: int) -> tuple[set, set]:
    """Streams spread over two replicas; ``rescale()`` (which returns once one replica is left)
    while 12 clients keep stepping; every stream's outputs, before, during and after, are a lone
    StatefulSession's. Returns the replicas that held the streams before and after."""
    rng, client = np.random.default_rng(seed), Client(url)
    until_both_servers_take_streams(client)
    streams = [client.open() for _ in range(STREAMS)]
    lones = [Lone() for _ in streams]
    plan = [[feeds(rng) for _ in range(300)] for _ in streams]
    got: list[list] = [[] for _ in streams]

    def step(k: int) -> None:
        got[k].append(streams[k].step(plan[k][len(got[k])]))

    for k in range(STREAMS):
        step(k)
    before = {client.where(s.id)["server"] for s in streams}
    assert len(before) == 2, "the streams did not spread over both replicas"

    stop, failed = threading.Event(), []

    def drive(k: int) -> None:
        try:
            while not stop.is_set() and len(got[k]) < len(plan[k]) - 5:
                step(k)
                time.sleep(0.01)
        except ServeError as exc:
            failed.append(f"stream {k}: {exc}")

    threads = [threading.Thread(target=drive, args=(k,), daemon=True) for k in range(STREAMS)]
    for t in threads:
        t.start()
    rescale()
    deadline = time.monotonic() + 60
    while _replicas() != {"RUNNING": 1}:
        assert time.monotonic() < deadline, _replicas()
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(30)
    assert failed == []
    assert min(len(g) for g in got) > 5, "the clients made no steps while the replicas changed"
    for k in range(STREAMS):
        step(k)
    after = {client.where(s.id)["server"] for s in streams}
    for k in range(STREAMS):
        for n, outputs in enumerate(got[k]):
            assert_same(outputs, lones[k].step(plan[k][n]), f"stream {k}, step {n}")
        streams[k].close()
    assert list(tmp_path.iterdir()) == []
    return before, after


def test_streams_survive_their_replicas_being_replaced(local_ray, tmp_path):
    """``serve.run`` again with one replica: Ray Serve's Python API replaces both replicas (a
    rolling replacement, as for a new version of the code); every stream ends on the new one."""

    def run(replicas: int) -> None:
        serve.run(
            make_app(ServeConfig(MODEL, state_dir=tmp_path, handoff=0.5), replicas=replicas),
            name="ortstate",
            route_prefix="/",
        )

    run(2)
    before, after = _survive(local_ray, tmp_path, lambda: run(1), seed=20)
    assert len(after) == 1 and not after & before, (before, after)
    serve.delete("ortstate")


def test_streams_survive_their_replica_being_removed(local_ray, tmp_path):
    """A declarative config (what ``serve run config.yaml`` and ``serve deploy`` apply) scaled from
    two replicas to one: Ray removes one replica in place and keeps the other running; the removed
    replica's streams continue exactly on the one left, whose own streams never moved."""
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    def apply(replicas: int) -> None:
        app = {
            "name": "ortstate",
            "route_prefix": "/",
            "import_path": "ortstate.serve.streams.ray_deployment:app_builder",
        }
        app["args"] = {"model": str(MODEL), "state_dir": str(tmp_path), "handoff": 0.5}
        app["deployments"] = [{"name": "ortstate", "num_replicas": replicas}]
        _get_global_client().deploy_apps(ServeDeploySchema(applications=[app]), _blocking=True)

    apply(2)
    before, after = _survive(local_ray, tmp_path, lambda: apply(1), seed=22)
    assert len(after) == 1 and after < before, (before, after)


def test_a_killed_durable_replicas_streams_continue_on_another(local_ray, tmp_path):
    """``--durable`` replicas: one replica's process SIGKILLed (no shutdown code runs) while 12
    clients step; its streams continue on a replica that is left, at their last acknowledged step,
    and every reply of every stream is a lone session's (none lost, none made twice)."""
    serve.run(
        make_app(ServeConfig(MODEL, state_dir=tmp_path, handoff=30, durable=True), replicas=2),
        name="ortstate",
        route_prefix="/",
    )
    victims = []

    def kill(held: dict) -> None:
        victims.append(sorted(set(held.values()))[0])
        os.kill(int(victims[0].rsplit(":", 1)[1]), signal.SIGKILL)

    held, after = durable_streams_survive(Client(local_ray), 23, kill, STREAMS)
    moved = [s for s, server in held.items() if server == victims[0]]
    assert moved and all(after[s] != victims[0] for s in moved)
    serve.delete("ortstate")

"""ortstate serve on Ray Serve, on this machine's Ray (127.0.0.1): streams routed by id over two
replicas that share a state directory; the replicas replaced by one while clients step, and every
stream continues exactly on the replica left."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
import ray
from conftest import MODEL, Lone, assert_same, feeds
from ray import serve

from ortstate.errors import ServeError
from ortstate.serve import Client
from ortstate.serve.ray_deployment import make_app
from ortstate.serve.server import bind

STREAMS = 12


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def _replicas() -> dict:
    return dict(serve.status().applications["ortstate"].deployments["ortstate"].replica_states)


def test_streams_survive_their_replica_being_replaced(local_ray, tmp_path):
    url, rng = local_ray, np.random.default_rng(20)
    serve.run(make_app(MODEL, tmp_path, replicas=2, handoff=0.5), name="ortstate", route_prefix="/")
    client = Client(url)
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
    serve.run(make_app(MODEL, tmp_path, replicas=1, handoff=0.5), name="ortstate", route_prefix="/")
    deadline = time.monotonic() + 60
    while _replicas() != {"RUNNING": 1}:
        assert time.monotonic() < deadline, _replicas()
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(30)
    assert failed == []
    assert min(len(g) for g in got) > 5, "the clients made no steps while the replicas were replaced"
    for k in range(STREAMS):
        step(k)
    after = {client.where(s.id)["server"] for s in streams}
    assert len(after) == 1 and not after & before, (before, after)
    for k in range(STREAMS):
        for n, outputs in enumerate(got[k]):
            assert_same(outputs, lones[k].step(plan[k][n]), f"stream {k}, step {n}")
        streams[k].close()
    assert list(tmp_path.iterdir()) == []

"""``--durable`` on a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): a replica
on each node; the second node removed (its processes killed, as a lost machine) while 12 clients
step: the streams of its replica continue on the head node's at their last acknowledged step."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import numpy as np
import ray
from conftest import MODEL, Lone, assert_same, feeds
from ray import serve
from ray.cluster_utils import Cluster

from ortstate.errors import ServeError
from ortstate.serve import Client
from ortstate.serve.ray_deployment import make_app
from ortstate.serve.server import bind

STREAMS = 12


def test_a_removed_nodes_streams_continue_on_the_other(tmp_path):
    environ, sigterm = dict(os.environ), signal.getsignal(signal.SIGTERM)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        worker = cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
        sock = bind("127.0.0.1", 0)
        port = sock.getsockname()[1]
        sock.close()
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        serve.run(make_app(MODEL, tmp_path, replicas=2, handoff=30, durable=True), name="ortstate", route_prefix="/")
        _survive_the_node(Client(f"http://127.0.0.1:{port}"), lambda: cluster.remove_node(worker))
        serve.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
        signal.signal(signal.SIGTERM, sigterm)
        os.environ.clear()
        os.environ.update(environ)


def _survive_the_node(client: Client, remove) -> None:
    rng = np.random.default_rng(24)
    streams = [client.open() for _ in range(STREAMS)]
    lones = [Lone() for _ in streams]
    plans: list[list] = [[] for _ in streams]
    got: list[list] = [[] for _ in streams]

    def step(k: int) -> None:
        plans[k].append(feeds(rng))
        got[k].append(streams[k].step(plans[k][-1]))

    for k in range(STREAMS):
        step(k)
    held = {s.id: client.where(s.id)["server"] for s in streams}
    assert len(set(held.values())) == 2, "the streams did not spread over both replicas"
    stop, failed = threading.Event(), []

    def drive(k: int) -> None:
        try:
            while not stop.is_set():
                step(k)
                time.sleep(0.01)
        except ServeError as exc:
            failed.append(f"stream {k}: {exc}")

    threads = [threading.Thread(target=drive, args=(k,), daemon=True) for k in range(STREAMS)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    marks = [len(g) for g in got]
    remove()
    deadline = time.monotonic() + 120
    while any(len(got[k]) < marks[k] + 5 for k in range(STREAMS)) and not failed:
        assert time.monotonic() < deadline, "the streams did not continue"
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(60)
    assert failed == []
    assert len({client.where(s.id)["server"] for s in streams}) == 1  # one replica left, holding all
    for k in range(STREAMS):
        for n, outputs in enumerate(got[k]):
            assert_same(outputs, lones[k].step(plans[k][n]), f"stream {k}, step {n}")
        assert client.where(streams[k].id)["steps"] == len(got[k])
        streams[k].close()

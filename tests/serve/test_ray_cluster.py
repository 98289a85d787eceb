"""``--durable`` on a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): a replica
on each node; the second node removed (its processes killed, as a lost machine) while 12 clients
step: the streams of its replica continue on the head node's at their last acknowledged step."""

from __future__ import annotations

import logging

import ray
from conftest import MODEL, durable_streams_survive, free_port, process_as_it_was
from ray import serve
from ray.cluster_utils import Cluster

from ortstate.serve import Client, ServeConfig
from ortstate.serve.streams.ray_deployment import make_app

STREAMS = 12


def test_a_removed_nodes_streams_continue_on_the_other(tmp_path):
    with process_as_it_was():
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        try:
            worker = cluster.add_node(num_cpus=1)
            ray.init(
                address=cluster.address, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False
            )
            port = free_port()
            serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
            app = make_app(ServeConfig(MODEL, state_dir=tmp_path, handoff=30, durable=True), replicas=2)
            serve.run(app, name="ortstate", route_prefix="/")
            _, after = durable_streams_survive(
                Client(f"http://127.0.0.1:{port}"), 24, lambda held: cluster.remove_node(worker)
            )
            assert len(set(after.values())) == 1  # one replica left, holding all
            serve.shutdown()
        finally:
            ray.shutdown()
            cluster.shutdown()

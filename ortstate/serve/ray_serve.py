"""What both servers' Ray Serve deployments share: a deployment of R replicas behind Ray Serve's
consistent-hash request router (each request about one stream, or one conversation, to the replica
its id hashes to, with no fallback replica), and running an application on Ray Serve from the
command line until it is told to stop."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig

from .config import positive_int
from .server import bind

__all__ = ["ROUTER", "deployment", "serve_on_ray"]

ROUTER = "ray.serve.experimental.consistent_hash_router.ConsistentHashRouter"


def deployment(replica: type, config: Any, *, replicas: int, ongoing: int, grace: float) -> Any:
    """The Ray Serve application ``ortstate``: ``replicas`` replicas of ``replica(config)``, each
    taking ``ongoing`` requests at once, routed by :data:`ROUTER`; a replica removed gets ``grace``
    seconds for what it serves to end.

    Raises:
        SettingError: ``replicas`` is not a positive integer.
    """
    positive_int("replicas", replicas)
    return serve.deployment(
        replica,
        name="ortstate",
        num_replicas=replicas,
        max_ongoing_requests=ongoing,
        request_router_config=RequestRouterConfig(
            request_router_class=ROUTER, request_router_kwargs={"num_fallback_replicas": 0}
        ),
        graceful_shutdown_wait_loop_s=0.5,
        graceful_shutdown_timeout_s=grace,
    ).bind(config)


def serve_on_ray(
    app: Any,
    host: str,
    port: int,
    ready: Callable[[str], None],
    replicas: int,
    environment: Mapping[str, str] | None = None,
) -> None:
    """Run ``app`` on Ray Serve (this machine's Ray, started here, or the cluster ``RAY_ADDRESS``
    names) with its HTTP proxy on ``host``:``port``, until SIGTERM or SIGINT; then shut Serve down
    (each replica hands its sockets over and parks its streams) and return. ``environment``: variables
    Ray's processes started here must see (they inherit this process's), set for as long as Ray runs
    and restored after, so that a later Ray in the same process starts as it would have."""
    with _environment(environment or {}):
        _serve_on_ray(app, host, port, ready, replicas)


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _serve_on_ray(app: Any, host: str, port: int, ready: Callable[[str], None], replicas: int) -> None:
    import ray

    if port == 0:
        sock = bind(host, 0)
        port = sock.getsockname()[1]
        sock.close()
    local = "RAY_ADDRESS" not in os.environ
    ray.init(
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        num_cpus=max(os.cpu_count() or 1, replicas) if local else None,
    )
    for name in ("ray", "ray.serve"):
        logging.getLogger(name).setLevel(logging.WARNING)
    stop = threading.Event()  # after ray.init, which installs signal handlers of its own
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(app, name="ortstate", route_prefix="/")
        ready(f"http://{host}:{port}")
        while not stop.wait(0.5):
            pass
        serve.shutdown()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        ray.shutdown()

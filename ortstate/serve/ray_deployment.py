"""``ortstate serve MODEL --ray``: the same app as a Ray Serve deployment of R replicas, each with a
:class:`~ortstate.streams.StreamPool` of its own, routed by stream id.

- Ray Serve's consistent-hash request router sends every request about a stream (the client sends
  its id as ``X-Session-Id``) to the replica the id hashes to, with no fallback replica.
- The replicas share one state directory (:class:`StreamService` ``shared=True``): a new stream is
  parked there at once, a replica restores a stream it does not hold from there (a miss), and a
  stream is parked again whenever its socket closes.
- A socket is handed over after ``handoff`` seconds (parked, closed with 1012; the client connects
  again and sends again), so when a replica is removed (scaled down, restarted) its sockets close
  within ``handoff`` seconds, its streams are parked, and the ring sends each to a replica that is
  left, which restores it exactly. Ray's graceful shutdown waits for those sockets.

For a ``serve run`` or ``serve deploy`` config: ``import_path:
ortstate.serve.ray_deployment:app_builder`` with ``args: {model: ..., state_dir: ...}``, and
``deployments: [{name: ortstate, num_replicas: R}]`` to scale in place.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnxruntime as ort
from ray import serve
from ray.serve.config import RequestRouterConfig

from ..errors import ServeError
from .app import DEFAULT_MAX_MESSAGE_BYTES
from .server import bind, build

__all__ = ["DEFAULT_HANDOFF", "ROUTER", "OrtStateStreams", "app_builder", "make_app", "serve_on_ray"]

ROUTER = "ray.serve.experimental.consistent_hash_router.ConsistentHashRouter"
DEFAULT_HANDOFF = 5.0  # seconds a socket lives before its stream is handed over
_GRACE = 10.0  # past the handoff: how long Ray waits for a removed replica's sockets


@serve.ingress()
class OrtStateStreams:
    """One replica: a StreamPool behind the ``ortstate serve`` app (``settings``: :func:`make_app`'s)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings

    def __serve_build_asgi_app__(self) -> Any:
        s = self.settings
        options = ort.SessionOptions()
        options.intra_op_num_threads = s["threads"]
        options.inter_op_num_threads = 1
        _, app = build(
            s["model"],
            s["max_streams"],
            s["max_batch"],
            s["max_delay"],
            s["state_dir"],
            s["token"],
            s["max_message_bytes"],
            s["idle_park"],
            options,
            shared=True,
            handoff=s["handoff"],
            durable=s.get("durable", False),
        )
        return app


def make_app(
    model: str | os.PathLike[str],
    state_dir: str | os.PathLike[str],
    *,
    replicas: int = 2,
    max_streams: int = 1024,
    max_batch: int | None = None,
    max_delay: float = 0.0005,
    token: str | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    idle_park: float | None = None,
    handoff: float = DEFAULT_HANDOFF,
    threads: int = 1,
    durable: bool = False,
) -> Any:
    """The Ray Serve application serving ``model``'s streams on ``replicas`` replicas, for
    ``serve.run``. Running it again (another ``replicas``) replaces every replica, one after
    another; to add or remove replicas in place, deploy :func:`app_builder` from a config and
    change the deployment's ``num_replicas`` there (docs/serve.md).

    ``model`` and ``state_dir`` must be paths every replica reaches (on a cluster: a shared
    filesystem); ``max_streams`` is per replica. ``durable``: each replica logs every step it
    acknowledges (``--durable``); the streams of a replica that dies without its shutdown code
    (SIGKILL, its node lost) continue on another at their last acknowledged step.
    """
    if type(replicas) is not int or replicas < 1:
        raise ServeError(f"replicas must be a positive integer, got {replicas!r}")
    if not handoff > 0:
        raise ServeError(f"handoff must be positive, got {handoff!r}")
    settings = {
        "model": str(Path(model).resolve()),
        "state_dir": str(Path(state_dir).resolve()),
        "max_streams": max_streams,
        "max_batch": max_batch,
        "max_delay": max_delay,
        "token": token,
        "max_message_bytes": max_message_bytes,
        "idle_park": idle_park,
        "handoff": handoff,
        "threads": threads,
        "durable": bool(durable),
    }
    deployment = serve.deployment(
        OrtStateStreams,
        name="ortstate",
        num_replicas=replicas,
        max_ongoing_requests=2 * max_streams + 64,  # each open socket is an ongoing request
        request_router_config=RequestRouterConfig(
            request_router_class=ROUTER, request_router_kwargs={"num_fallback_replicas": 0}
        ),
        graceful_shutdown_wait_loop_s=0.5,
        graceful_shutdown_timeout_s=handoff + _GRACE,
    )
    return deployment.bind(settings)


def app_builder(args: dict[str, Any]) -> Any:
    """The application for ``serve run``: ``args`` are :func:`make_app`'s (``model`` and
    ``state_dir`` required)."""
    missing = [k for k in ("model", "state_dir") if k not in args]
    if missing:
        raise ServeError(f"ortstate's Ray Serve application needs args {', '.join(missing)}")
    given = dict(args)
    numbers = {"replicas": int, "max_streams": int, "max_batch": int, "threads": int, "max_message_bytes": int}
    numbers.update({"max_delay": float, "idle_park": float, "handoff": float})
    numbers["durable"] = _flag
    options = {k: numbers[k](v) if k in numbers else v for k, v in given.items() if k not in ("model", "state_dir")}
    return make_app(given["model"], given["state_dir"], **options)


def _flag(value: Any) -> bool:
    """A config's yes/no (YAML gives a bool; a string from elsewhere is read as one)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def serve_on_ray(app: Any, host: str, port: int, ready: Callable[[str], None], replicas: int) -> None:
    """Run ``app`` on Ray Serve (this machine's Ray, started here, or the cluster ``RAY_ADDRESS``
    names) with its HTTP proxy on ``host``:``port``, until SIGTERM or SIGINT; then shut Serve down
    (each replica hands its sockets over and parks its streams) and return."""
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

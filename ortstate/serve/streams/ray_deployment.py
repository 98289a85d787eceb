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
ortstate.serve.streams.ray_deployment:app_builder`` with ``args: {model: ..., state_dir: ...}``, and
``deployments: [{name: ortstate, num_replicas: R}]`` to scale in place.
"""

from __future__ import annotations

import os
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig

from ...errors import ServeError
from ..ray_serve import ROUTER
from ..server import build
from .config import ServeConfig

__all__ = ["DEFAULT_HANDOFF", "OrtStateStreams", "app_builder", "make_app"]

DEFAULT_HANDOFF = 5.0  # seconds a socket lives before its stream is handed over
_GRACE = 10.0  # past the handoff: how long Ray waits for a removed replica's sockets


@serve.ingress()
class OrtStateStreams:
    """One replica: a StreamPool behind the ``ortstate serve`` app, as ``config`` says."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config

    def __serve_build_asgi_app__(self) -> Any:
        _, app = build(self.config)
        return app


def make_app(
    model: str | os.PathLike[str],
    state_dir: str | os.PathLike[str],
    *,
    replicas: int = 2,
    handoff: float = DEFAULT_HANDOFF,
    **settings: Any,
) -> Any:
    """The Ray Serve application serving ``model``'s streams on ``replicas`` replicas, for
    ``serve.run``; ``settings`` are :class:`ServeConfig`'s (``max_streams`` per replica, ``token``,
    ``durable``: each replica logs every step it acknowledges, and the streams of a replica that
    dies without its shutdown code (SIGKILL, its node lost) continue on another at their last
    acknowledged step). Running it again (another ``replicas``) replaces every replica, one after
    another; to add or remove replicas in place, deploy :func:`app_builder` from a config and change
    the deployment's ``num_replicas`` there (docs/serve.md).

    ``model`` and ``state_dir`` must be paths every replica reaches (on a cluster: a shared
    filesystem).

    Raises:
        ServeError: ``replicas`` or a setting out of range.
    """
    if type(replicas) is not int or replicas < 1:
        raise ServeError(f"replicas must be a positive integer, got {replicas!r}")
    config = ServeConfig(str(model), state_dir=str(state_dir), shared=True, handoff=handoff, **settings)
    return _deployment(config.resolved(), replicas)


def _deployment(config: ServeConfig, replicas: int) -> Any:
    assert config.handoff is not None
    deployment = serve.deployment(
        OrtStateStreams,
        name="ortstate",
        num_replicas=replicas,
        max_ongoing_requests=2 * config.max_streams + 64,  # each open socket is an ongoing request
        request_router_config=RequestRouterConfig(
            request_router_class=ROUTER, request_router_kwargs={"num_fallback_replicas": 0}
        ),
        graceful_shutdown_wait_loop_s=0.5,
        graceful_shutdown_timeout_s=config.handoff + _GRACE,
    )
    return deployment.bind(config)


def app_builder(args: dict[str, Any]) -> Any:
    """The application for ``serve run``: ``args`` are :func:`make_app`'s (``model`` and
    ``state_dir`` required; values as YAML gives them, or strings)."""
    given = dict(args)
    missing = [k for k in ("model", "state_dir") if k not in given]
    if missing:
        raise ServeError(f"ortstate's Ray Serve application needs args {', '.join(missing)}")
    replicas = int(given.pop("replicas", 2))
    given.setdefault("handoff", DEFAULT_HANDOFF)
    config = ServeConfig.from_args({**given, "shared": True})
    if type(replicas) is not int or replicas < 1:
        raise ServeError(f"replicas must be a positive integer, got {replicas!r}")
    return _deployment(config.resolved(), replicas)

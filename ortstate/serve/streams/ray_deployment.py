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

import dataclasses
from typing import Any

from ray import serve

from ...errors import ServeError
from ..ray_serve import deployment
from .config import ServeConfig
from .server import build

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


def make_app(config: ServeConfig, *, replicas: int = 2) -> Any:
    """The Ray Serve application serving ``config``'s streams on ``replicas`` replicas, for
    ``serve.run``: each replica a server as ``config`` says (``max_streams`` each, ``token``,
    ``durable``: each replica logs every step it acknowledges, and the streams of a replica that
    dies without its shutdown code, SIGKILL or its node lost, continue on another at their last
    acknowledged step), its streams shared in ``state_dir`` (required: ``shared`` is set) and its
    sockets handed over every ``handoff`` seconds (:data:`DEFAULT_HANDOFF` if None); ``host`` and
    ``port`` are not the replicas' (Ray's proxy listens). Running it again (another ``replicas``)
    replaces every replica, one after another; to add or remove replicas in place, deploy
    :func:`app_builder` from a config and change the deployment's ``num_replicas`` there
    (docs/serve.md).

    ``model`` and ``state_dir`` must be paths every replica reaches (on a cluster: a shared
    filesystem).

    Raises:
        SettingError: ``replicas`` is not a positive integer, or ``config`` has no ``state_dir``.
    """
    handoff = DEFAULT_HANDOFF if config.handoff is None else config.handoff
    given = dataclasses.replace(config, shared=True, handoff=handoff).resolved()
    ongoing = 2 * given.max_streams + 64  # each open socket is an ongoing request
    return deployment(OrtStateStreams, given, replicas=replicas, ongoing=ongoing, grace=handoff + _GRACE)


def app_builder(args: dict[str, Any]) -> Any:
    """The application for ``serve run``: ``args`` are :class:`ServeConfig`'s and ``replicas``
    (``model`` and ``state_dir`` required; values as YAML gives them, or strings)."""
    given = dict(args)
    missing = [k for k in ("model", "state_dir") if k not in given]
    if missing:
        raise ServeError(f"ortstate's Ray Serve application needs args {', '.join(missing)}")
    replicas = int(given.pop("replicas", 2))
    return make_app(ServeConfig.from_args(given), replicas=replicas)

"""``ortstate serve LLM_DIR --ray``: the OpenAI API of an LLM folder as a Ray Serve deployment of R
replicas, each with a :class:`~ortstate.generate.ContinuousBatcher` of its own, routed by
conversation id.

- Ray Serve's consistent-hash request router sends every request of a conversation (its
  ``X-Ortstate-Conversation`` header, which Ray's proxy reads as its session id: the environment
  variable :data:`SESSION_HEADER_VARIABLE` names it, set before Ray starts) to the replica the id
  hashes to, with no fallback replica; a request without one goes to any replica.
- The replicas share one state directory (:class:`~.conversations.Conversations` ``shared=True``):
  a turn's conversation is parked there as the turn ends, and the replica the next turn is routed
  to claims it from there, so a conversation continues on another replica when its own is removed,
  replaced or killed.
- Streamed answers (server-sent events) go through Ray's HTTP proxy as the app sends them.

For a ``serve run`` or ``serve deploy`` config: ``import_path: ortstate.serve.openai.ray_deployment:app_builder``
with ``args: {folder: ..., state_dir: ...}`` (and the cluster's proxy started with
``RAY_SERVE_SESSION_ID_HEADER_KEY=x-ortstate-conversation``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ray import serve

from ...errors import ServeError
from ..ray_serve import deployment
from .config import LlmServeConfig
from .conversations import HEADER
from .server import build

__all__ = [
    "ROUTING_ENVIRONMENT",
    "SESSION_HEADER_VARIABLE",
    "OrtStateLlm",
    "app_builder",
    "make_llm_app",
    "route_by_conversation",
]

SESSION_HEADER_VARIABLE = "RAY_SERVE_SESSION_ID_HEADER_KEY"  # the header Ray's proxy routes by
# What Ray's processes must see to route by conversation (they inherit the environment Ray starts in).
ROUTING_ENVIRONMENT = {SESSION_HEADER_VARIABLE: HEADER}
_GRACE = 15.0  # how long Ray waits for a removed replica's requests (they end, then it parks)


def route_by_conversation() -> None:
    """Make Ray Serve's proxy route by ``X-Ortstate-Conversation``: call before Ray starts on this
    machine (its processes inherit the environment); a cluster's must be started so. This sets it
    in this process for good: a stream server's Ray started later in the same process would route
    by the wrong header (``ortstate serve --ray`` sets :data:`ROUTING_ENVIRONMENT` only while its Ray
    runs)."""
    os.environ.update(ROUTING_ENVIRONMENT)


@serve.ingress()
class OrtStateLlm:
    """One replica: an LLM folder's batcher behind the OpenAI app, as ``config`` says."""

    def __init__(self, config: LlmServeConfig) -> None:
        self.config = config

    def __serve_build_asgi_app__(self) -> Any:
        _, app = build(self.config)
        return app


def make_llm_app(config: LlmServeConfig, *, replicas: int = 2) -> Any:
    """The Ray Serve application serving the LLM folder ``config`` names with OpenAI's API on
    ``replicas`` replicas, for ``serve.run``: each replica a server as ``config`` says
    (``max_requests`` and ``slots`` each; each keeps the whole shared directory within
    ``max_parked_bytes``), its conversations shared in ``state_dir`` (required: ``shared`` is set);
    ``host`` and ``port`` are not the replicas' (Ray's proxy listens). ``folder`` and ``state_dir``
    must be paths every replica reaches.

    Raises:
        SettingError: ``replicas`` is not a positive integer, or ``config`` has no ``state_dir``.
    """
    given = dataclasses.replace(config, shared=True).resolved()
    ongoing = given.max_requests + 64  # beyond max_requests the app answers 503 itself
    return deployment(OrtStateLlm, given, replicas=replicas, ongoing=ongoing, grace=_GRACE)


def app_builder(args: dict[str, Any]) -> Any:
    """The application for ``serve run``: ``args`` are :class:`LlmServeConfig`'s and ``replicas``
    (``folder`` and ``state_dir`` required; values as YAML gives them, or strings)."""
    given = dict(args)
    missing = [k for k in ("folder", "state_dir") if k not in given]
    if missing:
        raise ServeError(f"ortstate's Ray Serve LLM application needs args {', '.join(missing)}")
    replicas = int(given.pop("replicas", 2))
    return make_llm_app(LlmServeConfig.from_args(given), replicas=replicas)

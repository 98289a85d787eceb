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

import os
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig

from ...errors import ServeError
from ..ray_serve import ROUTER
from ..server import build_llm
from .conversations import HEADER

__all__ = ["SESSION_HEADER_VARIABLE", "OrtStateLlm", "app_builder", "make_llm_app", "route_by_conversation"]

SESSION_HEADER_VARIABLE = "RAY_SERVE_SESSION_ID_HEADER_KEY"  # the header Ray's proxy routes by
_GRACE = 15.0  # how long Ray waits for a removed replica's requests (they end, then it parks)
_SETTINGS = (
    "token",
    "model_name",
    "threads",
    "max_body_bytes",
    "max_conversations",
    "idle_park",
    "max_parked_bytes",
    "conversation_ttl",
)


def route_by_conversation() -> None:
    """Make Ray Serve's proxy route by ``X-Ortstate-Conversation``: call before Ray starts on this
    machine (its processes inherit the environment); a cluster's must be started so."""
    os.environ[SESSION_HEADER_VARIABLE] = HEADER


@serve.ingress()
class OrtStateLlm:
    """One replica: an LLM folder's batcher behind the OpenAI app, as ``settings`` say."""

    def __init__(self, folder: str, state_dir: str, settings: dict[str, Any]) -> None:
        self.folder, self.state_dir, self.settings = folder, state_dir, settings

    def __serve_build_asgi_app__(self) -> Any:
        _, app = build_llm(self.folder, state_dir=self.state_dir, shared=True, **self.settings)
        return app


def make_llm_app(
    folder: str | os.PathLike[str],
    state_dir: str | os.PathLike[str],
    *,
    replicas: int = 2,
    max_requests: int = 1024,
    slots: int = 64,
    **settings: Any,
) -> Any:
    """The Ray Serve application serving the LLM ``folder`` with OpenAI's API on ``replicas``
    replicas, for ``serve.run``; ``settings`` are :func:`~ortstate.serve.server.build_llm`'s (``token``,
    ``model_name``, ``threads``, ``max_body_bytes``, ``max_conversations``, ``idle_park``,
    ``max_parked_bytes``, ``conversation_ttl``), per replica (each replica keeps the whole shared
    directory within ``max_parked_bytes``). ``folder`` and ``state_dir`` must be paths every replica reaches.

    Raises:
        ServeError: ``replicas``, ``max_requests`` or ``slots`` not a positive integer, or an unknown setting.
    """
    for name, value in (("replicas", replicas), ("max_requests", max_requests), ("slots", slots)):
        if type(value) is not int or value < 1:
            raise ServeError(f"{name} must be a positive integer, got {value!r}")
    unknown = sorted(set(settings) - set(_SETTINGS))
    if unknown:
        raise ServeError(f"unknown settings of an LLM deployment: {', '.join(unknown)}")
    given = {"max_requests": max_requests, "slots": slots, "token": None, **settings}
    deployment = serve.deployment(
        OrtStateLlm,
        name="ortstate",
        num_replicas=replicas,
        max_ongoing_requests=max_requests + 64,  # beyond max_requests the app answers 503 itself
        request_router_config=RequestRouterConfig(
            request_router_class=ROUTER, request_router_kwargs={"num_fallback_replicas": 0}
        ),
        graceful_shutdown_wait_loop_s=0.5,
        graceful_shutdown_timeout_s=_GRACE,
    )
    return deployment.bind(str(folder), str(state_dir), given)


def app_builder(args: dict[str, Any]) -> Any:
    """The application for ``serve run``: ``args`` are :func:`make_llm_app`'s (``folder`` and
    ``state_dir`` required)."""
    given = dict(args)
    missing = [k for k in ("folder", "state_dir") if k not in given]
    if missing:
        raise ServeError(f"ortstate's Ray Serve LLM application needs args {', '.join(missing)}")
    return make_llm_app(given.pop("folder"), given.pop("state_dir"), **given)

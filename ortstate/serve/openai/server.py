"""The LLM server built from its :class:`~.config.LlmServeConfig`: the batcher and the service over
it, the app serving OpenAI's API; and run in a thread of this process (:func:`serve_llm_in_thread`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from ..server import Running, in_thread
from .app import create_llm_app
from .config import LlmServeConfig
from .service import LlmService

__all__ = ["build", "serve_llm_in_thread"]


def build(config: LlmServeConfig) -> tuple[LlmService, Any]:
    """The LLM folder's batcher (``slots`` requests generating at once, ``max_requests`` taken at
    once) and the app serving it with OpenAI's API; conversations logged and parked in
    ``state_dir`` (``shared``: by every turn, for the servers sharing it, Ray Serve's replicas),
    which holds ``max_parked_bytes`` at most, each removed once idle for ``conversation_ttl``.

    Raises:
        ServeError: the state directory cannot be used; GenerationError and the like: the folder
            cannot be served.
    """
    c = config
    assert c.slots is not None  # set by the config
    service = LlmService.from_dir(
        c.folder,
        model_name=c.model_name,
        max_requests=c.max_requests,
        slots=c.slots,
        threads=c.threads,
        kv_cache_bytes=c.kv_cache_bytes,
        prefix_cache=c.prefix_cache,
        max_model_len=c.max_model_len,
        state_dir=c.state_dir,
        max_conversations=c.max_conversations,
        shared=c.shared,
        max_parked_bytes=c.max_parked_bytes,
        conversation_ttl=c.conversation_ttl,
    )
    app = create_llm_app(
        service,
        token=c.token,
        allow_origins=c.allow_origins,
        max_body_bytes=c.max_body_bytes,
        idle_park=c.idle_park,
        access_log=c.access_log,
    )
    return service, app


def serve_llm_in_thread(config: LlmServeConfig, *, start_timeout: float = 60.0) -> AbstractContextManager[Running]:
    """``ortstate serve FOLDER`` (an optimum-intel LLM folder: OpenAI's API) in a thread of this
    process, for as long as the ``with`` block runs, as ``config`` says.

    Raises:
        ServeError: as :func:`~ortstate.serve.streams.server.serve_in_thread`; GenerationError and
            the like: the folder cannot be served.
    """
    return in_thread(config, build, start_timeout)

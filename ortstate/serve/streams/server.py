"""The stream server built from its :class:`~.config.ServeConfig`: the pool, the service over it,
the app serving it; and run in a thread of this process (:func:`serve_in_thread`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ...errors import ServeError
from ...streams import KvPool, StreamPool
from ..server import Running, in_thread
from .app import create_app
from .config import ServeConfig
from .service import StreamService

__all__ = ["build", "serve_in_thread"]


def build(config: ServeConfig) -> tuple[StreamService, Any]:
    """The streams of ``config.model`` (a pool of ``max_streams`` slots) and the app serving them;
    with ``shared``, servers sharing ``state_dir`` (see :class:`StreamService`). Without ``shared``,
    the service holds ``state_dir`` until its ``release()``.

    Raises:
        ServeError: a model with KV caches (an LLM: served from its folder), or a state directory
            that cannot be used; and whatever the pool raises loading the model.
    """
    c = config
    pool = StreamPool(
        c.model, c.max_streams, max_batch=c.max_batch, max_delay=c.max_delay, sess_options=c.session_options()
    )
    if isinstance(pool, KvPool):
        folder = Path(pool.loaded.origin).parent
        raise ServeError(
            f"{pool.loaded.origin}: an LLM with KV caches: serve its optimum-intel folder with the OpenAI API "
            f"(ortstate serve {folder}; docs/serve-llm.md)"
        )
    service = StreamService(pool, c.state_dir, shared=c.shared, durable=c.durable)
    app = create_app(
        service,
        token=c.token,
        allow_origins=c.allow_origins,
        max_message_bytes=c.max_message_bytes,
        idle_park=c.idle_park,
        handoff=c.handoff,
    )
    return service, app


def serve_in_thread(config: ServeConfig, *, start_timeout: float = 60.0) -> AbstractContextManager[Running]:
    """``ortstate serve`` in a thread of this process, for as long as the ``with`` block runs (a
    notebook, a test): the same app, as ``config`` says.

    Raises:
        ServeError: the address is refused (taken), ``state_dir`` cannot be written or another
            server holds it (``shared`` takes no lock), the open files limit is too low, or the
            server does not start within ``start_timeout`` seconds.
    """
    return in_thread(config, build, start_timeout)

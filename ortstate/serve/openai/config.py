"""An LLM server's settings, once: what the command line, :func:`~.server.serve_llm_in_thread` and
Ray Serve's replicas (and a ``serve run`` config's ``args``) all build a server from, checked in
one place (as ``uvicorn.Config`` is for uvicorn); it builds uvicorn's settings too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import uvicorn

from ..config import ServerSettings, check_address, check_needs, check_positive, check_seconds
from ..guard import Deadlines
from ..origin import check_origins
from ..server import uvicorn_config
from .app import DEFAULT_MAX_BODY_BYTES
from .errors import error_body

__all__ = ["DEFAULT_SLOTS", "LlmServeConfig"]

DEFAULT_SLOTS = 64  # requests generating at once, unless max_requests is fewer


@dataclass(frozen=True)
class LlmServeConfig(ServerSettings):
    """How to serve the optimum-intel LLM ``folder`` with OpenAI's API.

    Attributes:
        folder: the export folder (decoder-only, with its tokenizer.json and chat template).
        max_requests: requests a server takes at once (generating or waiting for a row; one more
            is answered 503).
        slots: requests generating at once, the batcher's rows (default: 64, or ``max_requests``
            if fewer).
        token: the bearer token every request must carry (none: loopback only, and requests to a
            loopback name only: :mod:`~ortstate.serve.origin`).
        allow_origins: web pages' origins (``scheme://host[:port]``) whose requests are served
            besides the server's own (a web UI on another port; :mod:`~ortstate.serve.origin`).
        model_name: the model's id in the API (default: the folder's name).
        threads: ONNX Runtime's intra-op threads (default: the physical cores this process may use).
        kv_cache_bytes: the KV memory of all requests (default: a quarter of the machine's), the
            prefix cache's streams included.
        prefix_cache: keep the streams of requests that ended as a cache within ``kv_cache_bytes``
            (least recently used evicted first) and start each request from the longest start
            of its prompt a stream holds, feeding only the rest (automatic prefix caching, as
            vLLM's, on by default; a model whose state is not KV caches alone caches nothing).
        max_model_len: the positions one request may reach, prompt and answer (default: the
            model's context; at most that).
        max_body_bytes: the largest request body.
        state_dir: where conversations are logged and parked (none: in memory only).
        max_conversations: conversations kept in memory at most (one more parks or forgets the
            least recently used).
        idle_park: park conversations idle that many seconds (none: never).
        shared: servers share ``state_dir`` on purpose (Ray Serve's replicas): each turn's
            conversation is parked there as it ends.
        max_parked_bytes: what ``state_dir`` may hold, its logs included (default: 10 GiB, or
            less where the disk has less room, see :mod:`.conversation_files`).
        conversation_ttl: remove a conversation idle that many seconds, in memory or parked
            (none: never).
        host, port: where the server listens (port 0: any free port; the command line's default is
            8000). Behind Ray Serve, where Ray's proxy listens.
        deadlines: each connection's (:class:`~ortstate.serve.guard.Deadlines`).
        access_log: a line per request on the logger ``ortstate.serve.access`` (INFO; the command
            line prints it on stderr).

    Raises:
        SettingError: a setting out of range, or missing one it needs (naming both).
        ServeError: an empty token, or an address other than loopback without a token.
    """

    served: ClassVar[str] = "folder"

    folder: Any
    max_requests: int = 1024
    slots: int | None = None
    token: str | None = None
    allow_origins: tuple[str, ...] = ()
    model_name: str | None = None
    threads: int | None = None
    kv_cache_bytes: int | None = None
    prefix_cache: bool = True
    max_model_len: int | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    state_dir: str | None = None
    max_conversations: int = 1024
    idle_park: float | None = None
    shared: bool = False
    max_parked_bytes: int | None = None
    conversation_ttl: float | None = None
    host: str = "127.0.0.1"
    port: int = 0
    deadlines: Deadlines = Deadlines()
    access_log: bool = True

    def __post_init__(self) -> None:
        check_positive(self, "max_requests", "slots", "threads", "kv_cache_bytes", "max_model_len", "max_body_bytes")
        check_positive(self, "max_conversations", "max_parked_bytes")
        check_seconds(self, "idle_park")
        check_seconds(self, "conversation_ttl", positive=True)
        check_needs(self, "shared", "state_dir", "a folder every replica reaches, where conversations move")
        check_needs(self, "idle_park", "state_dir", "parked conversations are written there")
        check_needs(self, "max_parked_bytes", "state_dir", "it bounds what is kept there")
        check_address(self.host, self.port, self.token)
        object.__setattr__(self, "allow_origins", check_origins(self.allow_origins))
        if self.slots is None:
            object.__setattr__(self, "slots", min(DEFAULT_SLOTS, self.max_requests))

    def uvicorn_config(self, app: Any) -> uvicorn.Config:
        """uvicorn's settings for ``app`` (:func:`~ortstate.serve.server.uvicorn_config`): places
        for ``max_requests``, the guard's own answers (a full server's 503, 408, ...) in OpenAI's body.

        Raises:
            ServeError: the hard limit of open files is too low for ``max_requests``.
        """
        return uvicorn_config(
            app,
            places=self.max_requests,
            token=self.token,
            deadlines=self.deadlines,
            max_message_bytes=self.max_body_bytes,  # the app takes no WebSocket: bounded as a body
            errors=error_body,
        )

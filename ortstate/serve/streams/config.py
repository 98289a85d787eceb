"""A stream server's settings, once: what the command line, :func:`~.server.serve_in_thread` and
Ray Serve's replicas (and a ``serve run`` config's ``args``) all build a server from, checked in
one place (as ``uvicorn.Config`` is for uvicorn); it builds uvicorn's settings too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import onnxruntime as ort
import uvicorn

from ...runtime.cpu import usable_cores
from ..config import ServerSettings, check_address, check_needs, check_positive, check_seconds
from ..guard import Deadlines
from ..origin import check_origins
from ..server import uvicorn_config
from .app import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["ServeConfig"]


@dataclass(frozen=True)
class ServeConfig(ServerSettings):
    """How to serve the streams of ``model``.

    Attributes:
        model: an IR ``.xml`` or an ONNX file, as ``StreamPool`` takes it.
        max_streams: streams a server holds at once (its pool's slots; per replica with Ray).
        max_batch, max_delay: the pool's ticks (``max_delay`` in seconds).
        state_dir: where streams are parked (none: in memory only).
        token: the bearer token every request must carry (none: loopback only, and requests to a
            loopback name only: :mod:`~ortstate.serve.origin`).
        allow_origins: web pages' origins (``scheme://host[:port]``) whose requests are served
            besides the server's own (a web UI on another port; :mod:`~ortstate.serve.origin`).
        max_message_bytes: the largest step message.
        idle_park: park streams idle that many seconds (none: never).
        threads: ONNX Runtime's intra-op threads (default: the physical cores this process may use).
        shared: servers share ``state_dir`` on purpose (Ray Serve's replicas).
        handoff: a socket is handed over after that many seconds (parked; the client reconnects).
        durable: log every acknowledged step in ``state_dir`` (see :mod:`.journal`).
        host, port: where the server listens (port 0: any free port; the command line's default is
            8000). Behind Ray Serve, where Ray's proxy listens.
        deadlines: each connection's (:class:`~ortstate.serve.guard.Deadlines`).

    Raises:
        SettingError: a setting out of range, or missing one it needs (naming both).
        ServeError: an empty token, or an address other than loopback without a token.
    """

    served: ClassVar[str] = "model"

    model: Any
    max_streams: int = 1024
    max_batch: int | None = None
    max_delay: float = 0.0005
    state_dir: str | None = None
    token: str | None = None
    allow_origins: tuple[str, ...] = ()
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    idle_park: float | None = None
    threads: int | None = None
    shared: bool = False
    handoff: float | None = None
    durable: bool = False
    host: str = "127.0.0.1"
    port: int = 0
    deadlines: Deadlines = Deadlines()

    def __post_init__(self) -> None:
        check_positive(self, "max_streams", "max_batch", "max_message_bytes", "threads")
        check_seconds(self, "max_delay", "idle_park")
        check_seconds(self, "handoff", positive=True)
        check_needs(self, "shared", "state_dir", "a folder every replica reaches, where streams move between them")
        check_needs(self, "idle_park", "state_dir", "parked streams are written there")
        check_needs(self, "durable", "state_dir", "its log is kept there")
        check_address(self.host, self.port, self.token)
        object.__setattr__(self, "allow_origins", check_origins(self.allow_origins))

    @property
    def threads_used(self) -> int:
        """``threads``, else the physical cores this process may use (where it runs)."""
        return self.threads or usable_cores()

    def session_options(self) -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads_used
        options.inter_op_num_threads = 1
        # a stream server's runs are short and its event loop needs the cores between them: ORT's
        # threads sleep when a run ends rather than spin (docs/serve.md, --threads)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return options

    def uvicorn_config(self, app: Any) -> uvicorn.Config:
        """uvicorn's settings for ``app`` (:func:`~ortstate.serve.server.uvicorn_config`): a place
        for each stream's socket, messages of ``max_message_bytes``.

        Raises:
            ServeError: the hard limit of open files is too low for ``max_streams``.
        """
        return uvicorn_config(
            app,
            places=self.max_streams,
            token=self.token,
            deadlines=self.deadlines,
            max_message_bytes=self.max_message_bytes,
        )

"""Running the app under uvicorn on a socket of our own: the address is known (and refused, in one
line, if taken) before serving, and SIGTERM or SIGINT end the server gracefully with exit 0, every
open stream parked first."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import onnxruntime as ort
import uvicorn

from ..errors import ServeError
from ..streams import StreamPool
from ..streams.kv_pool import KvPool
from .auth import check_exposure
from .compat import run_with
from .guard import Deadlines, Guard, raise_open_files
from .openai.app import DEFAULT_MAX_BODY_BYTES, create_llm_app
from .openai.errors import full_body
from .openai.service import LlmService
from .streams.app import DEFAULT_MAX_MESSAGE_BYTES, create_app
from .streams.config import ServeConfig
from .streams.service import StreamService

__all__ = [
    "Deadlines",
    "Running",
    "ServeConfig",
    "Service",
    "bind",
    "build",
    "build_llm",
    "run_loop",
    "serve_forever",
    "serve_in_thread",
    "serve_llm_in_thread",
    "url_of",
]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_SECONDS = 5.0  # how long a shutdown waits for sockets to close before cancelling them


class Service(Protocol):
    """What the server's lifecycle asks of what it serves (a :class:`StreamService`, an
    :class:`LlmService`): stop taking work and wait for what runs, park what it holds, let go."""

    async def drain(self, timeout: float) -> None: ...

    async def park_all(self) -> int: ...

    def release(self) -> None: ...


class _Server(uvicorn.Server):
    """uvicorn's server, except that its shutdown first lets every step in flight finish and reply
    (uvicorn would cut the sockets at once), and a signal it handled is not raised again after the
    shutdown: a server told to stop has done what it was told (exit 0)."""

    def __init__(self, settings: uvicorn.Config, service: Service) -> None:
        super().__init__(settings)
        self.service = service

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.service.drain(GRACE_SECONDS)
        self.config.http.guard.close_all()  # those not being answered: uvicorn waits for the ones it counts
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port).

    Raises:
        ServeError: the address cannot be resolved or taken.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def config(
    app: Any,
    max_message_bytes: int,
    max_streams: int,
    token: str | None,
    *,
    deadlines: Deadlines | None = None,
    full: bytes | None = None,
) -> uvicorn.Config:
    """uvicorn's settings for ``app``: quiet, bounded, every connection under :mod:`.guard`'s
    deadlines (``deadlines``) and places (4 × ``max_streams`` + 64 authorised connections; ``full``:
    the JSON body of the 503 when all are held, the guard's own if None), with a graceful shutdown
    of a few seconds. The limit of open files is raised to what that takes.

    Raises:
        ServeError: the hard limit of open files is too low for ``max_streams``.
    """
    connections = 4 * max_streams + 64
    raise_open_files(connections)
    guard = Guard(token, connections, deadlines=deadlines, full_body=full)
    return uvicorn.Config(
        app,
        http=guard.protocol(),
        log_level="warning",
        access_log=False,
        lifespan="on",
        # Messages up to twice the limit are read and answered with an error; larger ones close
        # the socket (1009, "message too big") before they are buffered whole.
        ws_max_size=max(2 * max_message_bytes, max_message_bytes + 65536),
        ws_max_queue=4,
        # Step messages are small arrays: compressing each costs more than sending it (zlib was a
        # tenth of the server's time at 256 streams).
        ws_per_message_deflate=False,
        limit_concurrency=None,  # the guard's places instead: uvicorn's count every idle connection
        timeout_keep_alive=guard.deadlines.idle,  # the guard's idle deadline too: either closes
        timeout_graceful_shutdown=GRACE_SECONDS,
    )


def serve_forever(
    app: Any, service: Service, sock: socket.socket, settings: uvicorn.Config, ready: Callable[[], None]
) -> None:
    """Serve ``app`` on ``sock`` until SIGTERM or SIGINT; then every open stream is parked (with a
    state directory) and this returns."""
    server = _Server(settings, service)

    async def main() -> None:
        ready()
        try:
            await server.serve(sockets=[sock])
        finally:  # the app's shutdown parked them, unless a second Ctrl-C skipped it
            await service.park_all()

    try:
        run_loop(main())
    finally:
        service.release()


def run_loop(main: Any) -> Any:
    """Run the coroutine ``main`` to its end on uvloop where it is installed (uvicorn[standard]
    brings it on Linux and macOS: its loop costs a WebSocket step about half of asyncio's own
    selector loop), else on asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return run_with(main, uvloop.new_event_loop)


def build(config: ServeConfig, sess_options: ort.SessionOptions | None = None) -> tuple[StreamService, Any]:
    """The streams of ``config.model`` (a pool of ``max_streams`` slots) and the app serving them;
    with ``shared``, servers sharing ``state_dir`` (see :class:`StreamService`). Without ``shared``,
    the service holds ``state_dir`` until its ``release()``."""
    c = config
    options = sess_options if sess_options is not None else c.session_options()
    pool = StreamPool(c.model, c.max_streams, max_batch=c.max_batch, max_delay=c.max_delay, sess_options=options)
    if isinstance(pool, KvPool):
        folder = Path(pool.loaded.origin).parent
        raise ServeError(
            f"{pool.loaded.origin}: an LLM with KV caches: serve its optimum-intel folder with the OpenAI API "
            f"(ortstate serve {folder}; docs/serve.md)"
        )
    service = StreamService(pool, c.state_dir, shared=c.shared, durable=c.durable)
    app = create_app(
        service, token=c.token, max_message_bytes=c.max_message_bytes, idle_park=c.idle_park, handoff=c.handoff
    )
    return service, app


def build_llm(
    folder: str | Path,
    max_requests: int,
    slots: int,
    token: str | None,
    *,
    model_name: str | None = None,
    threads: int | None = None,
    kv_cache_bytes: int | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    state_dir: str | Path | None = None,
    max_conversations: int = 1024,
    idle_park: float | None = None,
    shared: bool = False,
    max_parked_bytes: int | None = None,
    conversation_ttl: float | None = None,
) -> tuple[LlmService, Any]:
    """An optimum-intel LLM folder's batcher (``slots`` requests generating at once, ``max_requests``
    taken at once) and the app serving it with OpenAI's API; conversations logged and parked in
    ``state_dir`` (``shared``: by every turn, for the servers sharing it, Ray Serve's replicas),
    which holds ``max_parked_bytes`` at most, each removed once idle for ``conversation_ttl``."""
    service = LlmService.from_dir(
        folder,
        model_name=model_name,
        max_requests=max_requests,
        slots=slots,
        threads=threads,
        kv_cache_bytes=kv_cache_bytes,
        state_dir=state_dir,
        max_conversations=max_conversations,
        shared=shared,
        max_parked_bytes=max_parked_bytes,
        conversation_ttl=conversation_ttl,
    )
    return service, create_llm_app(service, token=token, max_body_bytes=max_body_bytes, idle_park=idle_park)


@dataclass(frozen=True)
class Running:
    """A server :func:`serve_in_thread` or :func:`serve_llm_in_thread` runs: its URL and what it serves."""

    url: str
    service: Any  # a StreamService, or an LlmService


@contextlib.contextmanager
def serve_in_thread(
    model: Any,
    max_streams: int = 1024,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    start_timeout: float = 60.0,
    deadlines: Deadlines | None = None,
    **settings: Any,
) -> Iterator[Running]:
    """``ortstate serve`` in a thread of this process, for as long as the ``with`` block runs (a
    notebook, a test): the same app; ``settings`` are :class:`ServeConfig`'s (``max_delay`` in
    seconds, ``state_dir``, ``token``, ``durable``, ...); ``deadlines`` each connection's
    (:class:`~.guard.Deadlines`, its defaults if None).

    Raises:
        ServeError: a setting out of range, the address is refused (not loopback without a token,
            taken), ``state_dir`` cannot be written or another server holds it (``shared`` takes
            no lock), the open files limit is too low, or the server does not start.
    """
    given = ServeConfig(model, max_streams, **settings)
    check_exposure(host, given.token)
    service, app = build(given)

    def uvicorn_settings() -> uvicorn.Config:
        return config(app, given.max_message_bytes, max_streams, given.token, deadlines=deadlines)

    with _in_thread(service, uvicorn_settings, host, port, start_timeout) as running:
        yield running


@contextlib.contextmanager
def serve_llm_in_thread(
    folder: str | Path,
    max_requests: int = 1024,
    *,
    slots: int = 64,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    model_name: str | None = None,
    threads: int | None = None,
    kv_cache_bytes: int | None = None,
    state_dir: str | Path | None = None,
    max_conversations: int = 1024,
    idle_park: float | None = None,
    max_parked_bytes: int | None = None,
    conversation_ttl: float | None = None,
    start_timeout: float = 60.0,
    deadlines: Deadlines | None = None,
) -> Iterator[Running]:
    """``ortstate serve FOLDER`` (an optimum-intel LLM folder: OpenAI's API) in a thread of this
    process, for as long as the ``with`` block runs (``deadlines``: as :func:`serve_in_thread`'s).

    Raises:
        ServeError: as :func:`serve_in_thread`; GenerationError and the like: the folder cannot be served.
    """
    check_exposure(host, token)
    service, app = build_llm(
        folder,
        max_requests,
        slots,
        token,
        model_name=model_name,
        threads=threads,
        kv_cache_bytes=kv_cache_bytes,
        state_dir=state_dir,
        max_conversations=max_conversations,
        idle_park=idle_park,
        max_parked_bytes=max_parked_bytes,
        conversation_ttl=conversation_ttl,
    )

    def uvicorn_settings() -> uvicorn.Config:
        return config(app, DEFAULT_MAX_MESSAGE_BYTES, max_requests, token, deadlines=deadlines, full=full_body())

    with _in_thread(service, uvicorn_settings, host, port, start_timeout) as running:
        yield running


@contextlib.contextmanager
def _in_thread(
    service: Service, settings: Callable[[], uvicorn.Config], host: str, port: int, start_timeout: float
) -> Iterator[Running]:
    """Serve in a thread with uvicorn's ``settings()`` (which may refuse: ``service`` is let go)."""
    try:
        server = _Server(settings(), service)
        sock = bind(host, port)
    except BaseException:
        service.release()
        raise
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="ortstate-serve")
    thread.start()
    deadline = time.monotonic() + start_timeout
    try:
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise ServeError(f"the server on {url_of(sock)} did not start")
            time.sleep(0.01)
        yield Running(url_of(sock), service)
    finally:
        server.should_exit = True
        thread.join(GRACE_SECONDS + 10)
        sock.close()
        service.release()

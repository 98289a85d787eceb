"""What both servers' lifecycles share: the app runs under uvicorn on a socket of our own, so the
address is known (and refused, in one line, if taken) before serving, every connection is under
:mod:`.guard`'s deadlines and places, and SIGTERM or SIGINT end the server gracefully with exit 0,
what it holds parked first. A server is built from its config (:class:`ServerConfig`): in this
process until a signal (:func:`start`, :func:`serve_forever`: the command line), or in a thread for
as long as a ``with`` block runs (:func:`in_thread`)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import uvicorn

from ..errors import ServeError
from .compat import run_with
from .guard import Deadlines, Guard
from .open_files import raise_open_files

__all__ = [
    "GRACE_SECONDS",
    "Running",
    "ServerConfig",
    "Service",
    "Started",
    "bind",
    "in_thread",
    "run_loop",
    "serve_forever",
    "start",
    "url_of",
    "uvicorn_config",
]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_SECONDS = 5.0  # how long a shutdown waits for sockets to close before cancelling them


class Service(Protocol):
    """What the server's lifecycle asks of what it serves (a :class:`StreamService`, an
    :class:`LlmService`): stop taking work and wait for what runs, park what it holds, let go."""

    async def drain(self, timeout: float) -> None: ...

    async def park_all(self) -> int: ...

    def release(self) -> None: ...


class ServerConfig(Protocol):
    """What the lifecycle asks of a server's config (a :class:`ServeConfig`, an :class:`LlmServeConfig`)."""

    host: str
    port: int

    def uvicorn_config(self, app: Any) -> uvicorn.Config: ...


S = TypeVar("S", bound=ServerConfig)
Build = Callable[[S], tuple[Any, Any]]  # a config -> (its service, the ASGI app serving it)


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


def uvicorn_config(
    app: Any,
    *,
    places: int,
    token: str | None,
    deadlines: Deadlines,
    max_message_bytes: int,
    errors: Callable[[int, str], bytes] | None = None,
) -> uvicorn.Config:
    """uvicorn's settings for ``app``: quiet, bounded, every connection under :mod:`.guard`'s
    ``deadlines`` and places (4 × ``places`` + 64 authorised connections; ``errors``: the server's
    JSON error body of a status and a message, for the guard's own 400, 408, 431 and 503; the
    stream server's if None), WebSocket messages of
    ``max_message_bytes``, with a graceful shutdown of a few seconds. The limit of open files is
    raised to what that takes.

    Raises:
        ServeError: the hard limit of open files is too low for ``places``.
    """
    connections = 4 * places + 64
    raise_open_files(connections)
    guard = Guard(token, connections, deadlines=deadlines, error_body=errors)
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


@dataclass(frozen=True)
class Started:
    """A server ready to serve (:func:`start`): its socket, what it serves, the app, uvicorn's settings."""

    sock: socket.socket
    service: Any  # a StreamService, or an LlmService
    app: Any
    settings: uvicorn.Config

    @property
    def url(self) -> str:
        return url_of(self.sock)


def start(config: S, build: Build[S]) -> Started:
    """Listen where ``config`` says, then build what it serves (``build(config)``) and uvicorn's
    settings; what was taken is let go if a step fails.

    Raises:
        ServeError: the address is refused or taken, the state directory cannot be used, the open
            files limit is too low; and whatever ``build`` raises.
    """
    sock = bind(config.host, config.port)
    try:
        service, app = build(config)
    except BaseException:
        sock.close()
        raise
    try:
        return Started(sock, service, app, config.uvicorn_config(app))
    except BaseException:
        sock.close()
        service.release()
        raise


def serve_forever(started: Started, ready: Callable[[], None]) -> None:
    """Serve until SIGTERM or SIGINT (``ready()`` once it listens); then what the service holds is
    parked (with a state directory) and this returns."""
    server = _Server(started.settings, started.service)

    async def main() -> None:
        ready()
        try:
            await server.serve(sockets=[started.sock])
        finally:  # the app's shutdown parked them, unless a second Ctrl-C skipped it
            await started.service.park_all()

    try:
        run_loop(main())
    finally:
        started.service.release()


def run_loop(main: Any) -> Any:
    """Run the coroutine ``main`` to its end on uvloop where it is installed (uvicorn[standard]
    brings it on Linux and macOS: its loop costs a WebSocket step about half of asyncio's own
    selector loop), else on asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return run_with(main, uvloop.new_event_loop)


@dataclass(frozen=True)
class Running:
    """A server :func:`in_thread` runs: its URL and what it serves."""

    url: str
    service: Any  # a StreamService, or an LlmService


@contextlib.contextmanager
def in_thread(config: S, build: Build[S], start_timeout: float) -> Iterator[Running]:
    """The server ``config`` says (``build`` makes what it serves) in a thread of this process, for
    as long as the ``with`` block runs; stopped as SIGTERM stops it, what it holds parked.

    Raises:
        ServeError: as :func:`start`, or the server does not start within ``start_timeout`` seconds.
    """
    started = start(config, build)
    server = _Server(started.settings, started.service)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [started.sock]}, daemon=True, name="ortstate-serve")
    thread.start()
    deadline = time.monotonic() + start_timeout
    try:
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise ServeError(f"the server on {started.url} did not start")
            time.sleep(0.01)
        yield Running(started.url, started.service)
    finally:
        server.should_exit = True
        thread.join(GRACE_SECONDS + 10)
        started.sock.close()
        started.service.release()

"""What ``ortstate serve`` does for both of its servers: the command line's settings handed to a
server's config, whose refusal is said in the command line's terms (``--max-streams``, exit 2);
serving in this process until SIGTERM or Ctrl-C; serving on Ray Serve."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ServeError, UsageError
from ..extras import install_hint

__all__ = ["EXIT_STREAMS_LOST", "option", "ray_installed", "run_on_ray", "serve_here", "usage"]

EXIT_STREAMS_LOST = 3  # stopped, but streams or conversations that could not be parked (a full disk) are lost
# A config's field -> the option that sets it, where the two are not spelt alike.
_OPTIONS = {
    "max_requests": "--max-streams",
    "slots": "--max-batch",
    "max_delay": "--max-delay-ms / 1000",
    "max_body_bytes": "--max-message-bytes",
    "shared": "--ray",
    "allow_origins": "--allow-origin",
}


def option(field: str) -> str:
    """The option of ``ortstate serve`` that sets a config's ``field``."""
    return _OPTIONS.get(field, "--" + field.replace("_", "-"))


def usage(exc: ServeError) -> UsageError:
    """A server's refusal of what the command line asked for, naming its options (exit 2)."""
    from ..serve.config import SettingError  # (the serve extra is optional: imported once it is there)

    return UsageError(exc.naming(option) if isinstance(exc, SettingError) else str(exc))


def serve_here(config: Any, build: Callable[[Any], tuple[Any, Any]], says: Callable[[Any, str], str]) -> Any:
    """Serve ``config`` in this process (``build`` makes what it serves) until SIGTERM or Ctrl-C,
    ``says(service, url)`` printed once it listens; the service, stopped.

    Raises:
        UsageError: the address is refused or taken, the state directory cannot be used, the open
            files limit is too low.
    """
    from ..serve.server import serve_forever, start

    try:
        started = start(config, build)
    except ServeError as exc:
        raise usage(exc) from None
    serve_forever(started, lambda: print(says(started.service, started.url), flush=True))
    return started.service


def ray_installed() -> None:
    """Raises ``UsageError`` unless Ray Serve can be imported (before a module that imports it)."""
    if importlib.util.find_spec("ray") is None:
        raise UsageError(f"ortstate serve --ray needs Ray Serve: {install_hint('ray')}")


def run_on_ray(
    config: Any,
    make: Callable[..., Any],
    replicas: int,
    ready: Callable[[str], None],
    environment: Mapping[str, str] | None = None,
) -> None:
    """Serve ``make(config, replicas=replicas)`` (a Ray Serve application) on Ray Serve, its proxy
    where ``config`` says, until SIGTERM or Ctrl-C; ``ready(url)`` once it serves. The state
    directory every replica shares is made here first; ``environment`` is set only while Ray runs.

    Raises:
        UsageError: the application refuses ``replicas``, or the state directory cannot be made.
    """
    from ..serve.ray_serve import serve_on_ray

    try:
        app = make(config, replicas=replicas)
        Path(config.state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    except ServeError as exc:
        raise usage(exc) from None
    except OSError as exc:
        raise UsageError(f"--state-dir {config.state_dir}: {exc.strerror}") from None
    serve_on_ray(app, config.host, config.port, ready, replicas, environment)

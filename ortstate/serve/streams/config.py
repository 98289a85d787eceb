"""A stream server's settings, once: what the command line, :func:`~ortstate.serve.server.serve_in_thread` and
Ray Serve's replicas (and a ``serve run`` config's ``args``) all build a server from, checked in
one place (as ``uvicorn.Config`` is for uvicorn).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort

from ...errors import ServeError
from .app import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["ServeConfig"]


@dataclass(frozen=True)
class ServeConfig:
    """How to serve the streams of ``model``.

    Attributes:
        model: an IR ``.xml`` or an ONNX file, as ``StreamPool`` takes it.
        max_streams: streams a server holds at once (its pool's slots; per replica with Ray).
        max_batch, max_delay: the pool's ticks (``max_delay`` in seconds).
        state_dir: where streams are parked (none: in memory only).
        token: the bearer token every request must carry (none: loopback only).
        max_message_bytes: the largest step message.
        idle_park: park streams idle that many seconds (none: never).
        threads: ONNX Runtime's intra-op threads.
        shared: servers share ``state_dir`` on purpose (Ray Serve's replicas).
        handoff: a socket is handed over after that many seconds (parked; the client reconnects).
        durable: log every acknowledged step in ``state_dir`` (see :mod:`.journal`).
    """

    model: Any
    max_streams: int = 1024
    max_batch: int | None = None
    max_delay: float = 0.0005
    state_dir: str | None = None
    token: str | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    idle_park: float | None = None
    threads: int = 1
    shared: bool = False
    handoff: float | None = None
    durable: bool = False

    def __post_init__(self) -> None:
        for name in ("max_streams", "max_batch", "max_message_bytes", "threads"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise ServeError(f"{name} must be a positive integer, got {value!r}")
        for name in ("max_delay", "idle_park", "handoff"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise ServeError(f"{name} must be a number of seconds >= 0, got {value!r}")
        if self.handoff is not None and not self.handoff > 0:
            raise ServeError(f"handoff must be positive, got {self.handoff!r}")
        if self.idle_park is not None and self.state_dir is None:
            raise ServeError("idle_park needs a state_dir: parked streams are written there")
        if self.durable and self.state_dir is None:
            raise ServeError("durable needs a state_dir: its log is kept there")
        if self.shared and self.state_dir is None:
            raise ServeError("servers that share their streams need a state directory they all reach")

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> ServeConfig:
        """From a ``serve run``/``serve deploy`` config's ``args`` (YAML's values, or strings):
        each coerced to its field's type; an unknown or missing one named.

        Raises:
            ServeError: a key it does not know, no ``model``, or a value that does not fit.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(args) - set(fields))
        if unknown:
            raise ServeError(f"unknown settings {', '.join(unknown)} (known: {', '.join(fields)})")
        if "model" not in args:
            raise ServeError("the settings need a model")
        return cls(**{k: _coerce(k, str(fields[k].type), v) for k, v in args.items()})

    def resolved(self) -> ServeConfig:
        """The same with absolute paths (what every replica of a cluster reaches)."""
        state_dir = None if self.state_dir is None else str(Path(self.state_dir).resolve())
        return dataclasses.replace(self, model=str(Path(self.model).resolve()), state_dir=state_dir)

    def session_options(self) -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        return options


def _coerce(name: str, kind: str, value: Any) -> Any:
    if value is None:
        return None
    try:
        if kind.startswith("bool"):
            return value.strip().lower() in ("1", "true", "yes", "on") if isinstance(value, str) else bool(value)
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("str") or name == "model":
            return os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    except (TypeError, ValueError):
        raise ServeError(f"{name}: expected {kind.split(' ')[0]}, got {value!r}") from None
    return value

"""What both servers' settings share (:class:`~ortstate.serve.streams.config.ServeConfig`,
:class:`~ortstate.serve.openai.config.LlmServeConfig`): each is one frozen dataclass whose fields
are checked once, as it is built, as ``uvicorn.Config`` is for uvicorn; the command line, the
``*_in_thread`` helpers and Ray Serve's replicas all build a server from one. A setting refused is a
:class:`SettingError`, which names the settings it is about so that a caller can name them its own
way (the command line: ``--max-streams``) without reading the message.
"""

from __future__ import annotations

import dataclasses
import math
import os
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..errors import ServeError
from .auth import check_exposure
from .guard import Deadlines

__all__ = [
    "ServerSettings",
    "SettingError",
    "check_address",
    "check_needs",
    "check_positive",
    "check_seconds",
    "positive_int",
    "shown",
]

C = TypeVar("C")


class SettingError(ServeError):
    """A server's setting refused: one line naming the settings it is about, ``{field}`` in
    ``template`` (``"{idle_park} needs {state_dir}: ..."``); ``str()`` names them by their fields.

    Attributes:
        field: the setting at fault (the first the message names).
        settings: every setting the message names, in order.
    """

    def __init__(self, template: str) -> None:
        self.template = template
        self.settings = tuple(name for _, name, _, _ in string.Formatter().parse(template) if name)
        super().__init__(self.naming(str))
        self.field = self.settings[0] if self.settings else None

    def naming(self, name: Callable[[str], str]) -> str:
        """The message with each setting named ``name(field)``."""
        return self.template.format_map({s: name(s) for s in self.settings})

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (Ray) with its template, not its message
        return (type(self), (self.template,))


class ServerSettings:
    """What a server's config (a frozen dataclass with a ``state_dir``) does whichever server it is:
    be built from a ``serve run`` config's ``args``, and give every replica of a cluster the same
    paths."""

    served: ClassVar[str]  # the field naming what is served (a model file, a folder): required, a path

    @classmethod
    def from_args(cls: type[C], args: dict[str, Any]) -> C:
        """From a ``serve run``/``serve deploy`` config's ``args`` (YAML's values, or strings):
        each coerced to its field's type; an unknown or missing one named.

        Raises:
            ServeError: a key it does not know, no :attr:`served` field, or a value that does not fit.
        """
        return _from_args(cls, args, cls.served)  # type: ignore[attr-defined]

    def resolved(self: C) -> C:
        """The same with absolute paths (what every replica of a cluster reaches)."""
        state_dir = self.state_dir
        served = type(self).served  # type: ignore[attr-defined]
        absolute = {served: str(Path(getattr(self, served)).resolve())}
        return dataclasses.replace(  # type: ignore[type-var]
            self, state_dir=None if state_dir is None else str(Path(state_dir).resolve()), **absolute
        )


def shown(value: Any) -> str:
    """``value`` as a refusal shows it (its ``repr``), safe inside a :class:`SettingError`'s template."""
    return repr(value).replace("{", "{{").replace("}", "}}")


def check_positive(config: Any, *names: str) -> None:
    """Each of ``config``'s settings ``names`` is None or a positive integer.

    Raises:
        SettingError: naming the first that is not.
    """
    for name in names:
        value = getattr(config, name)
        if value is not None:
            positive_int(name, value)


def positive_int(name: str, value: Any) -> None:
    """``value``, the setting ``name``, is a positive integer.

    Raises:
        SettingError: it is not, naming ``name``.
    """
    if type(value) is not int:
        raise SettingError(f"{{{name}}} must be an integer, got {shown(value)}")
    if value < 1:
        raise SettingError(f"{{{name}}} must be positive, got {shown(value)}")


def check_seconds(config: Any, *names: str, positive: bool = False) -> None:
    """Each of ``config``'s settings ``names`` is None or a finite number of seconds, >= 0 (or > 0:
    ``positive``).

    Raises:
        SettingError: naming the first that is not.
    """
    for name in names:
        value = getattr(config, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SettingError(f"{{{name}}} must be a number of seconds, got {shown(value)}")
        if value < 0 or (positive and value == 0):
            raise SettingError(f"{{{name}}} must be {'positive' if positive else '>= 0'}, got {shown(value)}")


def check_needs(config: Any, name: str, needed: str, why: str) -> None:
    """``config``'s setting ``needed`` is given where ``name`` is (set, or true).

    Raises:
        SettingError: ``name`` is and ``needed`` is not, saying ``why`` it needs it.
    """
    value = getattr(config, name)
    if (value is not None and value is not False) and getattr(config, needed) is None:
        raise SettingError(f"{{{name}}} needs {{{needed}}}: {why}")


def check_address(host: Any, port: Any, token: str | None) -> None:
    """Where a server listens: a host name or address, a port 0..65535 (0: any free one), and no
    address but loopback without a token (:func:`~.auth.check_exposure`).

    Raises:
        SettingError: the host or the port is not one.
        ServeError: an empty token, or another address than loopback without one.
    """
    if not isinstance(host, str) or not host:
        raise SettingError(f"{{host}} must be a host name or address, got {shown(host)}")
    if type(port) is not int or not 0 <= port <= 65535:
        raise SettingError(f"{{port}} must be 0..65535, got {shown(port)}")
    check_exposure(host, token)


def _from_args(cls: type[C], args: dict[str, Any], required: str) -> C:
    """A config ``cls`` from a ``serve run``/``serve deploy`` config's ``args`` (YAML's values, or
    strings): each coerced to its field's type; an unknown or missing one named.

    Raises:
        ServeError: a key it does not know, no ``required``, or a value that does not fit.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(args) - set(fields))
    if unknown:
        raise ServeError(f"unknown settings {', '.join(unknown)} (known: {', '.join(fields)})")
    if required not in args:
        raise ServeError(f"the settings need a {required}")
    return cls(**{k: _coerce(k, str(fields[k].type), v, required) for k, v in args.items()})


def _coerce(name: str, kind: str, value: Any, path: str) -> Any:
    if value is None:
        return None
    try:
        if kind.startswith("bool"):
            return value.strip().lower() in ("1", "true", "yes", "on") if isinstance(value, str) else bool(value)
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("tuple"):  # a list, or a string of items separated by commas
            return tuple(value.split(",")) if isinstance(value, str) else tuple(value)
        if kind.startswith("Deadlines"):
            return value if isinstance(value, Deadlines) else Deadlines(**value)
        if kind.startswith("str") or name == path:
            return os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    except (TypeError, ValueError):
        raise ServeError(f"{name}: expected {kind.split(' ')[0]}, got {value!r}") from None
    return value

"""The optional extras (``pyproject.toml``'s ``[project.optional-dependencies]``): what each one
brings, and the one way every message says how to install one.

ortstate installs from PyPI as ``ortstate`` or from a checkout as ``.``; a hint names both, so it
is right whichever way it was installed.
"""

from __future__ import annotations

import importlib.util
import sys

from .errors import OrtStateError

__all__ = ["EXTRAS", "MissingExtraError", "install_hint", "missing_extra", "missing_modules", "require_extra"]

# extra -> the modules it brings that ortstate imports
EXTRAS: dict[str, tuple[str, ...]] = {
    "verify": ("openvino",),
    "plot": ("matplotlib",),
    "text": ("tokenizers", "jinja2"),
    "serve": ("starlette", "uvicorn", "websockets", "httptools", "prometheus_client"),
    "ray": ("ray",),
    "genai": ("onnxruntime_genai", "tokenizers"),
    "structured": ("llguidance", "tokenizers"),
}


class MissingExtraError(OrtStateError, ImportError):
    """A part of ortstate was used whose optional extra is not installed (the message says which
    and how to install it). An ``ImportError`` too, as the import it stands for."""


def install_hint(extra: str) -> str:
    """``pip install 'ortstate[serve]'`` (``'.[serve]'`` in a checkout)."""
    return f"pip install 'ortstate[{extra}]' ('.[{extra}]' in a checkout)"


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (not found, or blocked: ``None`` in
    ``sys.modules``)."""
    return [m for m in EXTRAS[extra] if (sys.modules[m] is None if m in sys.modules else _unfound(m))]


def _unfound(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent package that is not one, a module without a spec
        return True


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``extra`` is installed.

    Args:
        what: who needs it, for the message (``"ortstate.serve"``).
    """
    message = missing_extra(extra, what)
    if message:
        raise MissingExtraError(message)


def missing_extra(extra: str, what: str) -> str | None:
    """What to say when ``what`` needs ``extra`` and some of its modules are missing (the extra
    named, the modules missing in passing); None when it is installed whole."""
    missing = missing_modules(extra)
    if not missing:
        return None
    return f"{what} needs the {extra} extra ({', '.join(missing)} missing): {install_hint(extra)}"

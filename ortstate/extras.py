"""The optional extras (``pyproject.toml``'s ``[project.optional-dependencies]``): what each one
brings, and the one way every message says how to install one.

ortstate installs from PyPI as ``ortstate`` or from a checkout as ``.``; a hint names both, so it
is right whichever way it was installed.
"""

from __future__ import annotations

import importlib.util

from .errors import OrtStateError

__all__ = ["EXTRAS", "MissingExtraError", "install_hint", "missing_modules", "require_extra"]

# extra -> the modules it brings that ortstate imports
EXTRAS: dict[str, tuple[str, ...]] = {
    "verify": ("openvino",),
    "plot": ("matplotlib",),
    "text": ("tokenizers", "jinja2"),
    "serve": ("starlette", "uvicorn", "websockets", "httptools"),
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
    """The modules of ``extra`` that cannot be imported here."""
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``extra`` is installed.

    Args:
        what: who needs it, for the message (``"ortstate.serve"``).
    """
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(f"{what} needs the {extra} extra ({', '.join(missing)} missing): {install_hint(extra)}")

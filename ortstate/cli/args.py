"""Reading what the command line names: files, ``NAME=FILE.npy`` inputs, ``NAME=1,3`` shapes."""

from __future__ import annotations

import argparse
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import IRFileError, UsageError
from ..model_path import model_file
from ..runtime.loaded import FORMS

FORM_HELP = (
    "how the variables are kept: auto (default) = the explicit form, the fastest; a custom-op .onnx "
    "is rewritten into it on load; custom-op = run the Python state ops (an IR is converted to that "
    "form); explicit = like auto, but refuse a model that can't be rewritten"
)


def add_form_option(p: argparse.ArgumentParser, help: str = FORM_HELP) -> None:  # noqa: A002 - argparse's word
    """``--form``: which form ``StatefulSession`` runs (see its ``form`` argument)."""
    p.add_argument("--form", choices=FORMS, default="auto", help=help)


def add_verbose_option(p: argparse.ArgumentParser, more: str = "") -> None:
    """``--verbose``: let ONNX Runtime's own log through (errors and warnings); ``main`` applies it."""
    p.add_argument(
        "--verbose", "-v", action="store_true", help="show ONNX Runtime's own log (warnings and errors)" + more
    )


__all__ = [
    "add_form_option",
    "add_verbose_option",
    "existing_file",
    "model_path",
    "load_npy",
    "parse_inputs",
    "parse_shapes",
    "split_assignment",
]


def existing_file(path: str | Path, what: str = "") -> Path:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{p}: no such file")
    if not p.is_file():
        raise UsageError(f"{p}: not a file{f' ({what})' if what else ''}")
    return p


def model_path(path: str | Path) -> Path:
    """The model file ``path`` names (a folder may name its one model: see
    :func:`ortstate.ir.model_path.model_file`)."""
    try:
        return model_file(path)
    except IRFileError as exc:
        raise UsageError(str(exc)) from None


def split_assignment(text: str, option: str, example: str) -> tuple[str, str]:
    """``NAME=VALUE`` -> (NAME, VALUE), split at the first ``=``."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise UsageError(f"{option} expects NAME=VALUE, e.g. {option} {example}; got {text!r}")
    return name, value


def load_npy(path: str | Path, name: str) -> np.ndarray:
    """A ``.npy`` file (or an ``.npz`` holding one array) as an array; no pickles."""
    p = existing_file(path)
    try:
        value = np.load(p, allow_pickle=False)
        if isinstance(value, np.ndarray):
            return value
        with value:  # an .npz archive: one array is that array; several are ambiguous
            keys = list(value.files)
            if len(keys) == 1:
                return value[keys[0]]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        # numpy says "pickled data" about any file without the .npy magic
        why = "not in .npy format" if "pickle" in str(exc) else " ".join(str(exc).split())
        raise UsageError(f"{p}: input '{name}': not a readable .npy file ({why})") from None
    held = f"{len(keys)} arrays ({', '.join(keys)})" if keys else "no array"
    raise UsageError(f"{p}: an .npz holding {held}; input '{name}' needs one array (numpy.save, or an .npz of one)")


def parse_inputs(items: Sequence[str] | None, option: str = "--input") -> dict[str, np.ndarray]:
    """``--input NAME=FILE.npy`` options (or another ``option`` of that form) -> {name: array}."""
    feeds: dict[str, np.ndarray] = {}
    for item in items or ():
        name, path = split_assignment(item, option, "x=x.npy")
        if name in feeds:
            raise UsageError(f"{option} {name} is given twice")
        feeds[name] = load_npy(path, name)
    return feeds


def parse_shapes(items: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """``--shape NAME=1,3`` options -> {name: (1, 3)}; ``NAME=`` is not allowed, a scalar is ``NAME=scalar``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or ():
        name, text = split_assignment(item, "--shape", "x=1,3")
        try:
            dims = () if text == "scalar" else tuple(int(d) for d in text.strip("[]").split(","))
        except ValueError:
            raise UsageError(f"--shape {item}: dims must be integers separated by commas, e.g. {name}=1,3") from None
        if any(d < 0 for d in dims):
            raise UsageError(f"--shape {item}: dims must not be negative")
        shapes[name] = dims
    return shapes

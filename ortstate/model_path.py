"""The model file a path names, where a folder may be given for it: ``convert models/accumulator``,
``StatefulSession("models/llm/llama")``.

A folder names its model when it holds optimum-intel's ``openvino_model.xml``, or exactly one model
file (``.xml`` or ``.onnx``); else the error lists what is there to choose from.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import IRFileError

__all__ = ["MODEL_SUFFIXES", "model_file"]

MODEL_SUFFIXES = (".xml", ".onnx")
_OPTIMUM = "openvino_model.xml"  # what optimum-intel's exports name their model


def model_file(path: str | os.PathLike[str]) -> Path:
    """``path`` if it is no folder; the model a folder holds (see the module docstring).

    Raises:
        IRFileError: nothing there, or a folder that holds no model or several (named).
    """
    given = Path(path)
    if not given.exists():
        raise IRFileError(f"{given}: no such file")
    if not given.is_dir():  # a FIFO or a device too: its reader refuses it, saying what it is
        return given
    if (given / _OPTIMUM).is_file():
        return given / _OPTIMUM
    try:
        found = sorted(p for p in given.iterdir() if p.suffix.lower() in MODEL_SUFFIXES and p.is_file())
    except OSError as exc:
        raise IRFileError(f"{given}: cannot read the folder: {exc.strerror or exc}") from None
    if len(found) == 1:
        return found[0]
    if not found:
        raise IRFileError(f"{given}: a folder with no model in it (an OpenVINO .xml or an .onnx file)")
    names = ", ".join(str(p) for p in found[:6]) + (", ..." if len(found) > 6 else "")
    raise IRFileError(f"{given}: a folder with {len(found)} models; give one of them: {names}")

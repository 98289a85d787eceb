"""What a session is given, read into an ONNX model: a path, bytes or an ``onnx.ModelProto``.

A file that is not ONNX is turned into a model by the loader registered for its suffix
(:func:`register_loader`): ``ortstate/__init__.py`` registers the OpenVINO IR converter for
``.xml``, so ``StatefulSession("model.xml")`` works while the runtime itself never imports the
converter (the contract between them is the ONNX model and its metadata).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from ..errors import IRFileError, OrtStateError
from ..model_path import model_file

__all__ = ["Loader", "Source", "read_source", "register_loader"]

# A loader reads a file into (a model, the values of its in-memory initializer stubs by name; see
# ``ortstate.passes.offload``), raising an OrtStateError when it can't.
Loader = Callable[[Path], tuple[onnx.ModelProto, Mapping[str, Any]]]
_LOADERS: dict[str, Loader] = {}


def register_loader(suffix: str, loader: Loader) -> None:
    """Read files ending in ``suffix`` (``".xml"``, any case) with ``loader`` instead of as ONNX."""
    _LOADERS[suffix.lower()] = loader


@dataclass
class Source:
    """A model as read.

    Attributes:
        model: the ONNX model (large initializers of a file or an IR not read into it).
        origin: how messages name it: the path given, or ``model``.
        arrays: values of the model's in-memory initializer stubs, by name.
        base_dir: the folder its external data is relative to (a file's); None otherwise.
        owned: the ModelProto was made here, so passes may change it in place; False for the
            caller's own ``onnx.ModelProto``, which must be copied first.
        converted: made by a registered loader (an IR): it has no form of its own to report.
    """

    model: onnx.ModelProto
    origin: str
    arrays: Mapping[str, Any] = field(default_factory=dict)
    base_dir: Path | None = None
    owned: bool = True
    converted: bool = False

    def own(self) -> onnx.ModelProto:
        """The model, copied first if it is the caller's: for a pass to change."""
        if not self.owned:
            copy = onnx.ModelProto()
            copy.CopyFrom(self.model)
            self.model, self.owned = copy, True
        return self.model


def read_source(model: str | os.PathLike[str] | bytes | onnx.ModelProto | Source) -> Source:
    """Read what a session was given (a :class:`Source` read before, and perhaps rewritten, is
    taken as it is: its in-memory initializers travel with it).

    Raises:
        IRFileError: a missing or non-regular file, or a folder that does not say which model.
        OrtStateError: not a path, bytes or ModelProto; a file that is not a readable ONNX model
            (or that the loader of its suffix refuses).
    """
    if isinstance(model, Source):
        return model
    if isinstance(model, onnx.ModelProto):
        return Source(model, "model", owned=False)
    if isinstance(model, (bytes, bytearray)):
        try:
            return Source(onnx.load_from_string(bytes(model)), "model")
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types
            raise OrtStateError(f"cannot parse ONNX model bytes: {exc}") from None
    if not isinstance(model, (str, os.PathLike)):
        raise OrtStateError(f"model: expected a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    path = model_file(model)
    if not path.is_file():  # a FIFO would block the read, a device never end it
        raise IRFileError(f"{path}: not a regular file")
    loader = _LOADERS.get(path.suffix.lower())
    if loader is not None:
        proto, arrays = loader(path)
        return Source(proto, str(model), arrays, converted=True)
    try:
        return Source(onnx.load(str(path), load_external_data=False), str(model), base_dir=path.parent)
    except Exception as exc:  # noqa: BLE001
        raise OrtStateError(f"{path}: not a readable ONNX model: {exc}") from None

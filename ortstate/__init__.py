"""ortstate: run OpenVINO stateful models (ReadValue/Assign) in ONNX Runtime.

This module composes the packages: it gives the runtime the converter as the loader of ``.xml``
files, so that ``StatefulSession("model.xml")`` converts the IR (to the custom-op form; the session
then picks its form as for any custom-op model) while ``ortstate.runtime`` itself never imports
``ortstate.convert``.
"""

from pathlib import Path

import onnx

from .convert import build, convert
from .errors import (
    ConversionError,
    ExportError,
    IRError,
    IRFileError,
    OrtStateError,
    OutputFileError,
    PoolFullError,
    RunError,
    RuntimeTooOldError,
    ServeError,
    StateError,
    UnsupportedOpsError,
)
from .export import export
from .ir import read_ir
from .runtime import InferRequest, StatefulSession, VariableState
from .runtime.source import register_loader
from .streams import StreamPool
from .version import __version__ as __version__

__all__ = [
    "ConversionError",
    "ExportError",
    "IRError",
    "IRFileError",
    "InferRequest",
    "OrtStateError",
    "OutputFileError",
    "PoolFullError",
    "RunError",
    "RuntimeTooOldError",
    "ServeError",
    "StateError",
    "StatefulSession",
    "StreamPool",
    "UnsupportedOpsError",
    "VariableState",
    "convert",
    "export",
]


def _load_ir(path: Path) -> tuple[onnx.ModelProto, dict]:
    """An IR as a session's model: converted in memory, its large weights left as stubs for the
    session to hand to ONNX Runtime (see ``ortstate.passes.offload``)."""
    built = build(read_ir(path))
    return built.model, built.arrays


register_loader(".xml", _load_ir)

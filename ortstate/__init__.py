"""ortstate: run OpenVINO stateful models (ReadValue/Assign) in ONNX Runtime."""

from .convert import convert
from .errors import (
    ConversionError,
    IRError,
    IRFileError,
    OrtStateError,
    RunError,
    StateError,
    UnsupportedOpsError,
)
from .runtime import InferRequest, StatefulSession, VariableState

__version__ = "0.1.0"

__all__ = [
    "ConversionError",
    "IRError",
    "IRFileError",
    "InferRequest",
    "OrtStateError",
    "RunError",
    "StateError",
    "StatefulSession",
    "UnsupportedOpsError",
    "VariableState",
    "convert",
]

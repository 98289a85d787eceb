"""Running converted models: the state ops, StatefulSession, infer requests and variable states."""

from .loaded import LoadedModel, numpy_dtype
from .request import InferRequest, VariableState
from .session import StatefulSession

__all__ = ["InferRequest", "LoadedModel", "StatefulSession", "VariableState", "numpy_dtype"]

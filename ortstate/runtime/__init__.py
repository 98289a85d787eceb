"""Running converted models: the state ops, StatefulSession, infer requests and variable states."""

from .request import InferRequest, VariableState
from .session import StatefulSession

__all__ = ["InferRequest", "StatefulSession", "VariableState"]

"""IR -> ONNX conversion."""

from .driver import convert, convert_graph, save, unsupported_ops
from .registry import registered

__all__ = ["convert", "convert_graph", "registered", "save", "unsupported_ops"]

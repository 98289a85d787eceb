"""IR -> ONNX conversion."""

from .driver import Built, build, convert, convert_graph, unsupported_ops
from .external import save_model
from .registry import registered
from .variables import Variable, collect_variables
from .weights_report import read_attention_report, read_report

__all__ = [
    "Built",
    "Variable",
    "build",
    "collect_variables",
    "convert",
    "convert_graph",
    "read_attention_report",
    "read_report",
    "registered",
    "save_model",
    "unsupported_ops",
]

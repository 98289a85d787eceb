"""The OpenVINO side: read IR v10/v11 into an immutable graph. Imports nothing from ONNX."""

from .graph import Edge, Graph, Layer, Port
from .layers import KNOWN_OPSETS
from .reader import read_ir
from .shapes import Dim, PartialShape, parse_partial_shape
from .types import ELEMENT_TYPES, ElementType, element_type

__all__ = [
    "ELEMENT_TYPES",
    "KNOWN_OPSETS",
    "Dim",
    "Edge",
    "ElementType",
    "Graph",
    "Layer",
    "PartialShape",
    "Port",
    "element_type",
    "parse_partial_shape",
    "read_ir",
]

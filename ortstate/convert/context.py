"""What a translator sees: the layer with its ONNX input values, and the builder to write into."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConversionError
from ..ir import ElementType, Graph, Layer, PartialShape, element_type, parse_partial_shape
from .builder import GraphBuilder
from .dtypes import onnx_type
from .folding import constant_value
from .loop_state import VariableScope
from .weights import FloatWeight, QuantizedWeight, plan_weights

__all__ = ["Context", "ConvertOptions", "Node", "OPSET"]

OPSET = 21
_MISSING: Any = object()


@dataclass
class Node:
    """One layer being translated. ``inputs`` are ONNX value names, one per input port."""

    layer: Layer
    inputs: list[str]
    graph: Graph

    @property
    def where(self) -> str:
        return f"{self.graph.source}: {self.layer.describe()}"

    def error(self, message: str) -> ConversionError:
        return ConversionError(f"{self.where}: {message}")

    # -- attributes -------------------------------------------------------------------------
    def attr(self, name: str, default: Any = _MISSING) -> str:
        value = self.layer.attrs.get(name)
        if value is None:
            if default is _MISSING:
                raise self.error(f"missing attribute '{name}'")
            return default
        return value

    def _parsed(self, name: str, default: Any, parse: Callable[[str], Any], expected: str) -> Any:
        """The attribute parsed by ``parse`` (ValueError: not ``expected``), or ``default`` if absent."""
        raw = self.attr(name, None)
        if raw is None:
            if default is _MISSING:
                raise self.error(f"missing attribute '{name}'")
            return default
        try:
            return parse(raw)
        except ValueError:
            raise self.error(f"attribute '{name}' expected {expected}, got {raw!r}") from None

    def attr_int(self, name: str, default: Any = _MISSING) -> int:
        return self._parsed(name, default, int, "an integer")

    def attr_float(self, name: str, default: Any = _MISSING) -> float:
        return self._parsed(name, default, float, "a number")

    def attr_bool(self, name: str, default: Any = _MISSING) -> bool:
        return self._parsed(name, default, _parse_bool, "true/false")

    def attr_ints(self, name: str, default: Any = _MISSING) -> list[int]:
        return self._parsed(name, default, lambda raw: [int(x) for x in raw.split(",") if x.strip()], "integers")

    def attr_choice(self, name: str, choices: Sequence[str], default: Any = _MISSING) -> str:
        value = self.attr(name, default).strip().lower()
        if value not in choices:
            raise self.error(f"attribute '{name}' expected one of {', '.join(choices)}, got {value!r}")
        return value

    def attr_type(self, name: str) -> ElementType:
        raw = self.attr(name)
        try:
            return element_type(raw)
        except KeyError:
            raise self.error(f"attribute '{name}': unknown element type {raw!r}") from None

    # -- ports --------------------------------------------------------------------------------
    def input_type(self, i: int) -> ElementType:
        etype = self.layer.inputs[i].element_type or self.graph.producer(self.layer, i)[1].element_type
        if etype is None:
            raise self.error(f"input {i} has no element type")
        return etype

    def output_type(self, i: int = 0) -> ElementType:
        etype = self.layer.outputs[i].element_type
        if etype is None:
            raise self.error(f"output {i} has no element type")
        return etype

    def onnx_input_type(self, i: int) -> int:
        return onnx_type(self.input_type(i), self.where)

    def onnx_output_type(self, i: int = 0) -> int:
        return onnx_type(self.output_type(i), self.where)

    def input_shape(self, i: int) -> PartialShape:
        return self.layer.inputs[i].shape

    def static_dim(self, i: int, axis: int) -> int | None:
        """Dim ``axis`` (non-negative) of input ``i`` when the IR port states it, else None."""
        dims = self.input_shape(i).dims
        if dims is None or not 0 <= axis < len(dims) or not dims[axis].is_static:
            return None
        return dims[axis].lo

    def input_rank(self, i: int) -> int:
        """The rank of input ``i``. Ports cannot tell scalars from dynamic ranks; see :class:`Port`."""
        producer, port = self.graph.producer(self.layer, i)
        if producer.type == "Parameter":
            rank = parse_partial_shape(producer.attrs.get("shape", "")).rank
            if rank is None:
                raise self.error(f"input {i} has a dynamic rank, which this op needs to know")
            return rank
        if producer.type == "Const":
            return self.graph.constant(producer).ndim
        return len(self.layer.inputs[i].shape.dims or ())

    def const(self, i: int) -> np.ndarray | None:
        """Input ``i``'s value when it is a constant (a Const, possibly through Convert); None for
        a quantized weight, which stays compressed (see :meth:`weight`). An f16 weight a
        translator needs as a value (LSTM gates to reorder, say) is folded to f32."""
        producer = self.graph.producer(self.layer, i)[0]
        if isinstance(plan_weights(self.graph).weights.get(producer.id), QuantizedWeight):
            return None
        return constant_value(self.graph, producer)

    def weight(self, i: int) -> QuantizedWeight | FloatWeight | None:
        """Input ``i`` as a compressed weight the converter keeps compressed (see ``weights``)."""
        return plan_weights(self.graph).weights.get(self.graph.producer(self.layer, i)[0].id)

    def const_ints(self, i: int, what: str) -> list[int]:
        value = self.const(i)
        if value is None:
            raise self.error(f"input {i} ({what}) must be a constant")
        return [int(v) for v in np.asarray(value).reshape(-1)]


def _parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("true", "1"):
        return True
    if low in ("false", "0"):
        return False
    raise ValueError(raw)


@dataclass(frozen=True)
class ConvertOptions:
    """Choices that change what the converted model computes (each also a ``convert`` argument).

    ``int8_activations``: compressed weights run on int8-quantized activations (``MatMulNBits``
    ``accuracy_level`` 4), as OpenVINO's default CPU config does: faster, logits move ~1e-2.
    """

    int8_activations: bool = False


@dataclass
class WeightRecord:
    """One compressed weight as converted, for ``inspect``: ``how`` it runs, its initializers."""

    layer: str
    source: str
    how: str
    initializers: list[str] = field(default_factory=list)


@dataclass
class AttentionRecord:
    """How one attention layer runs (``how``: ``GroupQueryAttention`` or ``composed``), and ``why``."""

    layer: str
    how: str
    why: str


class Context:
    """Translation state: the graph being read and the builder being written (swapped for subgraphs)."""

    def __init__(
        self,
        graph: Graph,
        builder: GraphBuilder,
        scope: VariableScope | None = None,
        options: ConvertOptions | None = None,
    ) -> None:
        self.graph = graph
        self.b = builder
        self.opset = OPSET
        self.scope = scope  # how loops in this graph reach the variables of their bodies
        self.options = options or ConvertOptions()
        # Per compressed weight and use: the initializers and attributes emitted, shared by every
        # consumer of that weight.
        self.emitted: dict[tuple[int, str, bool], tuple[list[str], dict[str, Any], bool]] = {}
        self.weights: list[WeightRecord] = []
        # Set by the driver for the main graph: the ONNX value of any layer's output (a translator
        # fusing several layers reads them), and values to read instead of others once every layer
        # is written ({old: new}: a fused kernel's output replacing what a fused layer made).
        self.value_of: Callable[[Layer, int], str] | None = None
        self.aliases: dict[str, str] = {}
        self.attention: list[AttentionRecord] = []
        # Variables whose past rows the runtime reorders by a graph input (beam_idx), by id.
        self.reorders: dict[str, str] = {}

    def record_attention(self, layer: Layer, how: str, why: str) -> None:
        self.attention.append(AttentionRecord(layer.name, how, why))

    def record_weight(self, layer: str, source: str, how: str, initializers: list[str]) -> None:
        self.weights.append(WeightRecord(layer, source, how, list(initializers)))

    def node(self, layer: Layer, inputs: list[str]) -> Node:
        return Node(layer, inputs, self.graph)

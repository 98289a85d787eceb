"""An immutable OpenVINO graph: layers, ports, edges and decoded constants."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..meta import name_prefix
from .packing import Packed
from .shapes import PartialShape
from .types import ElementType

__all__ = ["Edge", "Graph", "Layer", "Port"]


@dataclass(frozen=True)
class Port:
    """A layer's input or output port. ``element_type`` is None where the IR gives no precision.

    IR ports write no dims for both scalars and dynamic-rank tensors; ``shape`` then reads as a
    scalar, so translators needing the rank should look at producers they know (Parameter, Const).
    """

    id: int
    element_type: ElementType | None
    shape: PartialShape
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Edge:
    from_layer: int
    from_port: int
    to_layer: int
    to_port: int


@dataclass(frozen=True)
class Layer:
    """One ``<layer>``. ``version`` is the opset name (``opset8``); ``op_version`` its number."""

    id: int
    name: str
    type: str
    version: str
    attrs: Mapping[str, str]
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    rt_info: Mapping[str, str] = field(default_factory=dict)
    body: Graph | None = None
    port_map: tuple[Mapping[str, str], ...] = ()
    back_edges: tuple[Edge, ...] = ()

    @property
    def op_version(self) -> int | None:
        digits = self.version[5:] if self.version.startswith("opset") else ""
        return int(digits) if digits.isdigit() else None

    @property
    def op_name(self) -> str:
        """``Type-N`` as OpenVINO's docs name versioned ops."""
        return f"{self.type}-{self.op_version if self.op_version is not None else self.version}"

    def int_attr(self, name: str, default: int = 0) -> int | None:
        """Attribute ``name`` as an integer (``default`` where absent), None where it is not one
        (a pattern matcher then leaves the layer to its translator, which reports it)."""
        raw = self.attrs.get(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            return None

    def describe(self) -> str:
        """``layer 'NAME' (id N, Type-V)``, the name as :func:`~ortstate.meta.name_prefix` cuts it."""
        return f"layer '{name_prefix(self.name)}' (id {self.id}, {self.op_name})"

    def tensor_name(self, port_index: int = 0) -> str:
        """What OpenVINO's ``get_any_name()`` gives output ``port_index``: its smallest tensor name,
        else the layer's name. A Parameter's is the model input's name (in OpenVINO and in ONNX)."""
        names = self.outputs[port_index].names if port_index < len(self.outputs) else ()
        return min(names) if names else self.name

    def input_port(self, port_id: int) -> Port | None:
        found = self._input_index.get(port_id)
        return None if found is None else self.inputs[found]

    def output_port(self, port_id: int) -> Port | None:
        found = self._output_index.get(port_id)
        return None if found is None else self.outputs[found]

    def input_index(self, port_id: int) -> int | None:
        """The position of input port ``port_id`` among the inputs."""
        return self._input_index.get(port_id)

    # Port lookups by id in constant time: a layer may have thousands of ports, each looked up.
    @cached_property
    def _input_index(self) -> dict[int, int]:
        return {p.id: i for i, p in reversed(list(enumerate(self.inputs)))}

    @cached_property
    def _output_index(self) -> dict[int, int]:
        return {p.id: i for i, p in reversed(list(enumerate(self.outputs)))}


@dataclass(frozen=True, eq=False)
class Graph:
    """A validated graph. Layers keep the XML's order; ``order`` is a topological order.

    ``constants`` maps each Const layer id to its read-only value. ``rt_info`` is the model's
    ``<rt_info>`` flattened: ``<info name="N" value="V"/>`` as ``N``, ``<a><b value="V"/></a>`` as
    ``a/b`` (how ``Model.set_rt_info(["a", "b"])`` is written).
    """

    source: str
    layers: Mapping[int, Layer]
    edges: tuple[Edge, ...]
    constants: Mapping[int, np.ndarray]
    order: tuple[int, ...]
    version: int = 11
    name: str = ""
    rt_info: Mapping[str, str] = field(default_factory=dict)
    digest: str = ""  # of the IR's files (the main graph read by read_ir), identifying the model

    @cached_property
    def _producers(self) -> dict[tuple[int, int], tuple[int, int]]:
        return {(e.to_layer, e.to_port): (e.from_layer, e.from_port) for e in self.edges}

    @cached_property
    def _consumers(self) -> dict[tuple[int, int], list[tuple[int, int]]]:
        out: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for e in self.edges:
            out.setdefault((e.from_layer, e.from_port), []).append((e.to_layer, e.to_port))
        return out

    def producer(self, layer: Layer, input_index: int) -> tuple[Layer, Port]:
        """The layer and output port feeding ``layer``'s ``input_index``-th input port.

        Raises:
            IndexError: ``layer`` has no ``input_index``-th input.
            KeyError: ``layer`` is not in this graph.
        """
        from_layer, from_port = self._producers[(layer.id, layer.inputs[input_index].id)]
        src = self.layers[from_layer]
        port = src.output_port(from_port)
        assert port is not None  # the reader validated every edge
        return src, port

    def consumers(self, layer: Layer, output_index: int) -> list[tuple[Layer, int]]:
        """(layer, input index) pairs reading ``layer``'s ``output_index``-th output port."""
        result = []
        for to_layer, to_port in self._consumers.get((layer.id, layer.outputs[output_index].id), []):
            dst = self.layers[to_layer]
            index = dst.input_index(to_port)
            assert index is not None  # the reader validated every edge
            result.append((dst, index))
        return result

    def result_name(self, result: Layer) -> str:
        """A Result's output name as OpenVINO gives it: the smallest name of the tensor it takes,
        else its own name.

        Raises:
            IndexError, KeyError: ``result`` has no input (a damaged IR).
        """
        _, port = self.producer(result, 0)
        return min(port.names) if port.names else result.name

    def topological(self) -> list[Layer]:
        return [self.layers[i] for i in self.order]

    def all_layers(self) -> Iterator[Layer]:
        """Every layer, those of loop bodies (however deep) right after the loop's own."""
        stack: list[Iterator[Layer]] = [iter(self.layers.values())]
        while stack:
            layer = next(stack[-1], None)
            if layer is None:
                stack.pop()
                continue
            yield layer
            if layer.body is not None:
                stack.append(iter(layer.body.layers.values()))

    def of_type(self, *types: str) -> list[Layer]:
        return [layer for layer in self.layers.values() if layer.type in types]

    @property
    def parameters(self) -> list[Layer]:
        return self.of_type("Parameter")

    @property
    def results(self) -> list[Layer]:
        return self.of_type("Result")

    def constant(self, layer: Layer) -> np.ndarray:
        """The decoded value of a Const layer (read-only; sub-byte types unpacked one per byte, anew
        on each call: see :meth:`packed`).

        Raises:
            KeyError: ``layer`` is not a Const of this graph.
        """
        return self.constants[layer.id]

    def packed(self, layer: Layer) -> Packed | None:
        """A sub-byte Const as stored in the ``.bin`` (packed, not copied); None for other types."""
        lookup = getattr(self.constants, "packed", None)
        return lookup(layer.id) if lookup is not None and layer.id in self.constants else None

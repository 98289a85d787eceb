"""A tape that records ONNX nodes, initializers and graph I/O, handing out unique value names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..meta import fresh_name, name_prefix
from ..passes.walk import rename_in_nodes
from ..protosize import tensor_bytes
from .external import LARGE_BYTES, Array, Lazy, stub

__all__ = ["GraphBuilder", "Names"]

# Element types onnxruntime's Where lacks -> a type it has that holds every value exactly.
_WHERE_CARRIER = {
    onnx.TensorProto.BOOL: onnx.TensorProto.UINT8,
    onnx.TensorProto.INT16: onnx.TensorProto.INT32,
    onnx.TensorProto.UINT16: onnx.TensorProto.INT32,
    onnx.TensorProto.BFLOAT16: onnx.TensorProto.FLOAT,
}


class Names:
    """Unique value names shared by a graph and all its subgraphs (ONNX scoping forbids shadowing)."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._tried: dict[str, int] = {}  # a layer may make thousands of one hint (see fresh_name)

    def reserve(self, name: str) -> str:
        """Claim ``name`` exactly; callers check availability with :meth:`taken` first."""
        self._used.add(name)
        return name

    def taken(self, name: str) -> bool:
        return name in self._used

    def fresh(self, hint: str) -> str:
        """``hint``, or ``hint_N`` where taken (:func:`~ortstate.meta.fresh_name`'s rule)."""
        base = hint or "v"
        name = fresh_name(base, self._used, self._tried)
        self._used.add(name)
        return name


class GraphBuilder:
    """Records one ONNX graph. ``op`` returns the new value name(s); ``sub`` opens a subgraph."""

    def __init__(self, name: str, names: Names | None = None, hint: str = "", keep_large: bool = False) -> None:
        self.name = name
        self.names = names or Names()
        self.hint = hint
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.domains: set[str] = set()
        self._const_cache: dict[tuple[str, tuple[int, ...], bytes], str] = {}
        # With keep_large, initializers of LARGE_BYTES or more stay numpy arrays (often views into
        # the memory-mapped .bin) behind external-data stubs until the model is saved or loaded.
        self.keep_large = keep_large
        self.large: dict[str, Array] = {}

    @property
    def hint(self) -> str:
        """The start of the value and node names :meth:`op` makes: the layer being translated's
        name, as :func:`~ortstate.meta.name_prefix` cuts it."""
        return self._hint

    @hint.setter
    def hint(self, name: str) -> None:
        self._hint = name_prefix(name)

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        attrs: dict[str, Any] | None = None,
        *,
        outputs: int = 1,
        domain: str = "",
        names: Sequence[str] | None = None,
    ) -> Any:
        """Append a node; returns its output name, or a list of names when ``outputs != 1``."""
        outs = (
            list(names)
            if names is not None
            else [self.names.fresh(f"{self.hint or op_type}:{op_type}") for _ in range(outputs)]
        )
        node_name = self.names.fresh(f"{self.hint or op_type}/{op_type}")
        node = helper.make_node(op_type, list(inputs), outs, name=node_name, domain=domain or None, **(attrs or {}))
        self.nodes.append(node)
        if domain:
            self.domains.add(domain)
        return outs[0] if outputs == 1 and names is None else outs

    def where(self, cond: str, x: str, y: str, elem_type: int) -> str:
        """``Where(cond, x, y)`` for any element type: onnxruntime 1.31 has no Where kernel for
        bool, int16, uint16, uint64 or bfloat16, so those go through a type it has (exactly)."""
        if elem_type == onnx.TensorProto.UINT64:  # no exact carrier: y + (x - y) * cond, modulo 2**64
            pick = self.op("Cast", [cond], {"to": elem_type})
            return self.op("Add", [y, self.op("Mul", [self.op("Sub", [x, y]), pick])])
        carrier = _WHERE_CARRIER.get(elem_type)
        if carrier is None:
            return self.op("Where", [cond, x, y])
        wide = self.op("Where", [cond, self.op("Cast", [x], {"to": carrier}), self.op("Cast", [y], {"to": carrier})])
        return self.op("Cast", [wide], {"to": elem_type})

    def const(self, value: Any, dtype: Any = None, hint: str = "const") -> str:
        """An initializer holding ``value``; identical small constants are shared."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes()) if arr.size <= 64 else None
        if key is not None and key in self._const_cache:
            return self._const_cache[key]
        name = self.names.fresh(name_prefix(hint))
        if self.keep_large and arr.nbytes >= LARGE_BYTES:
            self.large[name] = arr
            self.initializers.append(stub(name, arr))
        else:
            self.initializers.append(numpy_helper.from_array(arr, name))
        if key is not None:
            self._const_cache[key] = name
        return name

    def named_const(self, name: str, value: Any) -> str | None:
        """An initializer called ``name`` holding ``value``, made once and shared by whatever asks for
        it in this graph; None when another graph of the model (a subgraph, or the one around this
        one) took the name first: the caller then uses a :meth:`const` of its own."""
        if any(i.name == name for i in self.initializers):
            return name
        if self.names.taken(name):
            return None
        self.names.reserve(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def lazy_const(self, shape: Sequence[int], dtype: Any, make: Any, hint: str = "const") -> str:
        """An initializer whose value ``make()`` computes when the model is saved or loaded (a
        transform of the ``.bin``'s bytes that would otherwise be held for the whole conversion)."""
        lazy = Lazy(tuple(shape), np.dtype(dtype), make)
        if not self.keep_large or lazy.nbytes < LARGE_BYTES:
            return self.const(lazy(), hint=hint)
        name = self.names.fresh(name_prefix(hint))
        self.large[name] = lazy
        self.initializers.append(stub(name, lazy))
        return name

    def add_input(self, name: str, elem_type: int, shape: Sequence[int | str | None] | None) -> None:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, None if shape is None else list(shape)))

    def add_output(self, name: str, elem_type: int, shape: Sequence[int | str | None] | None) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, None if shape is None else list(shape)))

    def sub(self, name: str) -> GraphBuilder:
        """A builder for a subgraph (If/Loop body) sharing this graph's names, and its record of
        the domains used (the model imports a domain any subgraph uses)."""
        child = GraphBuilder(name, self.names, self.hint)
        child.domains = self.domains
        return child

    def graph(self) -> onnx.GraphProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs)
        for tensor in self.initializers:
            _append_tensor(graph, tensor)
        return graph

    def rename_all(self, names: dict[str, str]) -> None:
        """Rename values produced by this graph's nodes (``{old: new}``), everywhere they are used,
        in one pass over the nodes."""
        rename_in_nodes(self.nodes, names)


# protobuf copies a message into a repeated field by serialising it, which fails past 2 GB: a
# tensor that large is rebuilt in place field by field.
COPY_LIMIT = 1 << 30


def _append_tensor(graph: onnx.GraphProto, tensor: onnx.TensorProto) -> None:
    if tensor_bytes(tensor) < COPY_LIMIT or not tensor.HasField("raw_data"):
        graph.initializer.append(tensor)
        return
    new = graph.initializer.add()
    new.name, new.data_type = tensor.name, tensor.data_type
    new.dims.extend(tensor.dims)
    new.raw_data = tensor.raw_data

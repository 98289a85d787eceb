"""Multiply-1, and the RMS norms it closes, as ONNX Runtime's ``SimplifiedLayerNormalization``.

OpenVINO's LLM exports (optimum-intel: Llama, Qwen2, Mistral, ...) write RMSNorm as::

    r = Divide(1, Sqrt(Add(ReduceMean(Power(x, 2), axes=[-1], keep_dims=true), eps)))
    y = Multiply(x, r)          then Multiply(y, gamma), unless OpenVINO dropped a gamma of ones

Translated op by op, that is six ONNX nodes per norm, two norms per layer, each a pass over the hidden
state plus a kernel launch; ONNX Runtime's own fusion misses it (it wants ``Div(x, Sqrt(...))`` then a
``Mul`` by gamma). So the Multiply that closes the pattern writes one
``SimplifiedLayerNormalization(x, gamma or ones)`` (an ONNX-domain kernel of ONNX Runtime, opset 1):
``x / sqrt(mean(x^2) + eps) * gamma`` in f32 — the same formula, which ONNX Runtime computes as
``x / s`` for ``x * (1 / s)`` anyway; only the order of the mean's sum is the kernel's. The nodes the
pattern's other layers emitted are pruned when nothing else reads them. Anything else is ``Mul``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ...ir import Graph, Layer
from ..context import Context, Node
from ..folding import constant_value
from ..kernels import check_broadcast
from ..registry import translator

_SLN = "SimplifiedLayerNormalization"


@translator("Multiply", 1)
def multiply_v1(node: Node, ctx: Context) -> list[str]:
    """Multiply-1 -> Mul; an RMS norm it closes (see the module docstring) -> SimplifiedLayerNormalization."""
    check_broadcast(node)
    fused = _rms_norm(node, ctx) if node.onnx_output_type(0) == TensorProto.FLOAT else None
    return [fused if fused is not None else ctx.b.op("Mul", node.inputs[:2])]


def _rms_norm(node: Node, ctx: Context) -> str | None:
    graph, layer = node.graph, node.layer
    for i in (0, 1):
        x, x_port = graph.producer(layer, 1 - i)
        last = (node.input_shape(1 - i).to_list() or [-1])[-1]
        eps = _rms_eps(graph, graph.producer(layer, i)[0], x, x_port.id, _rank(node.input_shape(1 - i)))
        if eps is not None and last > 0:  # Multiply(x, r): the norm without gamma
            return _emit(ctx, node.inputs[1 - i], np.ones(last, np.float32), eps)
        gamma = _gamma(node, 1 - i)
        if gamma is not None and _is_rms_product(graph, graph.producer(layer, i)[0]):
            emitted = _emitted(ctx, node.inputs[i])  # Multiply(Multiply(x, r), gamma)
            if emitted is not None and emitted[1] == gamma.size:
                return _emit(ctx, emitted[0], gamma, emitted[2])
    return None


def _emit(ctx: Context, x: str, gamma: np.ndarray, eps: float) -> str:
    scale = ctx.b.const(gamma.astype(np.float32), hint="rms_norm_scale")
    return ctx.b.op(_SLN, [x, scale], {"axis": -1, "epsilon": eps, "stash_type": 1})


def _emitted(ctx: Context, value: str) -> tuple[str, int, float] | None:
    """``(x, hidden, eps)`` of the SimplifiedLayerNormalization this graph emitted as ``value``."""
    for onnx_node in reversed(ctx.b.nodes):
        if value in onnx_node.output:
            if onnx_node.op_type != _SLN:
                return None
            eps = next(a.f for a in onnx_node.attribute if a.name == "epsilon")
            scale = next(t for t in ctx.b.initializers if t.name == onnx_node.input[1])
            return onnx_node.input[0], int(scale.dims[0]), eps
    return None


def _rank(shape: object) -> int:
    dims = getattr(shape, "dims", None)
    return len(dims) if dims else 0


def _gamma(node: Node, i: int) -> np.ndarray | None:
    """Input ``i`` as a per-channel scale ``[hidden]`` (leading dims of 1, none beyond the other
    input's rank), else None."""
    value = node.const(i)
    if value is None or value.ndim == 0 or value.dtype.kind != "f" or value.size != value.shape[-1]:
        return None
    return value.reshape(-1) if value.ndim <= _rank(node.input_shape(1 - i)) else None


def _is_rms_product(graph: Graph, layer: Layer) -> bool:
    """Whether IR ``layer`` is the ``Multiply(x, r)`` of an RMS norm."""
    if layer.type != "Multiply" or len(layer.inputs) != 2:
        return False
    for i in (0, 1):
        x, x_port = graph.producer(layer, 1 - i)
        if _rms_eps(graph, graph.producer(layer, i)[0], x, x_port.id, _rank(layer.inputs[1 - i].shape)) is not None:
            return True
    return False


def _rms_eps(graph: Graph, r: Layer, x: Layer, x_port: int, rank: int) -> float | None:
    """eps if ``r`` is ``Divide(1, Sqrt(Add(ReduceMean(Power(x, 2), [-1], keep_dims), eps)))`` of
    output ``x_port`` of ``x`` (of rank ``rank``), else None. Every constant must be one value of
    rank <= ``rank``, so that it broadcasts without changing the shape."""
    if rank < 1 or r.type != "Divide" or _const(graph, r, 0, rank) != 1.0:
        return None
    sqrt = graph.producer(r, 1)[0]
    add = graph.producer(sqrt, 0)[0] if sqrt.type == "Sqrt" else None
    if add is None or add.type != "Add":
        return None
    for j in (0, 1):
        eps, mean = _const(graph, add, 1 - j, rank), graph.producer(add, j)[0]
        if eps is not None and eps >= 0 and mean.type == "ReduceMean" and _mean_square(graph, mean, x, x_port, rank):
            return eps
    return None


def _const(graph: Graph, layer: Layer, i: int, rank: int) -> float | None:
    """Input ``i`` of ``layer`` when it is a single float constant of rank <= ``rank``."""
    value = constant_value(graph, graph.producer(layer, i)[0])
    if value is None or value.size != 1 or value.ndim > rank or value.dtype.kind != "f":
        return None
    return float(value.reshape(()))


def _mean_square(graph: Graph, mean: Layer, x: Layer, x_port: int, rank: int) -> bool:
    """Whether ``mean`` is ``ReduceMean(Power(x, 2), axes=[-1], keep_dims=true)``."""
    if mean.attrs.get("keep_dims", "false").lower() not in ("true", "1"):
        return False
    axes = constant_value(graph, graph.producer(mean, 1)[0])
    if axes is None or axes.size != 1 or int(axes.reshape(())) not in (-1, rank - 1):
        return False
    power = graph.producer(mean, 0)[0]
    if power.type != "Power" or _const(graph, power, 1, rank) != 2.0:
        return False
    base, base_port = graph.producer(power, 0)
    return base.id == x.id and base_port.id == x_port

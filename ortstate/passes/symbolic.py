"""What is known before a run about the values of one ONNX graph (see :mod:`.dims`), worked out
forward from its graph inputs (their declared dims: ONNX Runtime refuses a feed that does not match
a number there), its initializers (elements read only when small and held in the protobuf; a graph
input's initializer may be overridden, so only its shape counts) and ``Constant`` nodes, through the
ops listed in ``_RULES``; any other op's outputs are unknown. Only the given graph is walked: what
its subgraphs compute is unknown to it.

Passes use this to fold what is static (:mod:`.fold`); it changes nothing itself.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto

from .dims import INTS, MAX_ELEMENTS, UNKNOWN, Dim, Known, broadcast, element_count, of_input, of_tensor, static_dims

__all__ = ["analyse"]


def analyse(graph: onnx.GraphProto) -> dict[str, Known]:
    """``{value name: Known}`` for every value of ``graph`` (top level) something is known about."""
    known: dict[str, Known] = {}
    for tensor in graph.initializer:
        known[tensor.name] = of_tensor(tensor)
    for value in graph.input:  # overridable initializers included: their value is the feed's
        known[value.name] = of_input(value)
    for node in graph.node:
        rule = _RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        ins = [known.get(name, UNKNOWN) if name else UNKNOWN for name in node.input]
        try:
            outs = rule(node, ins) if rule else []
        except (ArithmeticError, LookupError, ValueError, TypeError):
            outs = []  # a model ONNX Runtime would refuse: nothing is known
        for name, value in zip(node.output, outs):
            if name and value is not UNKNOWN:
                known[name] = value
    return known


# -- rules: (node, what is known of its inputs) -> what is known of its outputs ---------------------
Rule = Callable[[onnx.NodeProto, list[Known]], list[Known]]


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _known(shape: tuple[Dim, ...] | None, elem: int | None, values: tuple[Dim, ...] | None = None) -> Known:
    n = element_count(shape)
    if values is not None and (n is None or n != len(values) or n > MAX_ELEMENTS):
        values = None
    fill = values[0] if values and all(v == values[0] for v in values) and values[0] is not None else None
    return Known(shape, elem, values, fill)


def _ints_of(k: Known) -> list[int] | None:
    """The elements of a static value as Python ints (axes, perms, indices)."""
    return [int(v) for v in k.values] if k.static and k.values is not None else None


def _shape(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    shape = ins[0].shape
    if shape is None:
        return [UNKNOWN]
    end = _attr(node, "end", None)
    part = shape[int(_attr(node, "start", 0)) : None if end is None else int(end)]  # type: ignore[call-overload]
    return [_known((len(part),), TensorProto.INT64, tuple(part))]


def _same(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    """Shape and elements unchanged (Identity); Cast keeps integer elements between integer types."""
    k = ins[0]
    if node.op_type != "Cast":
        return [k]
    to = int(_attr(node, "to"))
    if k.elem in INTS and to in INTS and to != TensorProto.BOOL and k.elem != TensorProto.BOOL:
        values = k.values
        if values is not None and all(isinstance(v, int) for v in values):
            dtype = onnx.helper.tensor_dtype_to_np_dtype(to)
            values = tuple(int(v) for v in np.array(values, dtype=np.int64).astype(dtype))
        return [_known(k.shape, to, values)]
    return [Known(k.shape, to)]


def _unary(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    return [Known(ins[0].shape, ins[0].elem)]


def _gather(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    data, idx = ins[0], ins[1]
    if data.shape is None or idx.shape is None:
        return [UNKNOWN]
    axis = int(_attr(node, "axis", 0)) % len(data.shape)
    shape = data.shape[:axis] + idx.shape + data.shape[axis + 1 :]
    picks = _ints_of(idx)
    values = None
    if len(data.shape) == 1 and data.values is not None and picks is not None:
        values = tuple(data.values[p] for p in picks)  # negative indices count from the end, as in ONNX
    elif data.fill is not None:
        return [Known(shape, data.elem, None, data.fill)]
    return [_known(shape, data.elem, values)]


def _concat(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    if any(k.shape is None for k in ins) or not ins:
        return [UNKNOWN]
    rank = len(ins[0].shape or ())
    axis = int(_attr(node, "axis", 0)) % rank
    along = [k.shape[axis] for k in ins]  # type: ignore[index]
    total: Dim = sum(along) if all(isinstance(d, int) for d in along) else None  # type: ignore[arg-type]
    shape = (ins[0].shape or ())[:axis] + (total,) + (ins[0].shape or ())[axis + 1 :]
    values = None
    if rank == 1 and all(k.values is not None for k in ins):
        values = tuple(v for k in ins for v in k.values or ())
    return [_known(shape, ins[0].elem, values)]


def _optional_input(node: onnx.NodeProto, ins: list[Known], index: int) -> Known | None:
    """Input ``index`` when the node has it (an optional input left out: None)."""
    return ins[index] if len(node.input) > index and node.input[index] else None


def _axes(node: onnx.NodeProto, ins: list[Known]) -> list[int] | None:
    """Squeeze's or Unsqueeze's axes (an input since opset 13, an attribute before), as given."""
    given = _optional_input(node, ins, 1)
    if given is not None:
        return _ints_of(given)
    axes = _attr(node, "axes", None)
    return None if axes is None else [int(a) for a in axes]  # type: ignore[union-attr]


def _squeeze(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    shape = ins[0].shape
    if shape is None:
        return [UNKNOWN]
    axes = _axes(node, ins)
    if axes is None and (_optional_input(node, ins, 1) is not None or not static_dims(shape)):
        return [UNKNOWN]
    picked = [i for i, d in enumerate(shape) if d == 1] if axes is None else [a % len(shape) for a in axes]
    if any(shape[a] != 1 for a in picked):
        return [UNKNOWN]
    return [_known(tuple(d for i, d in enumerate(shape) if i not in picked), ins[0].elem, ins[0].values)]


def _unsqueeze(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    shape, axes = ins[0].shape, _axes(node, ins)
    if shape is None or axes is None:
        return [UNKNOWN]
    rank = len(shape) + len(axes)
    out = list(shape)
    for a in sorted(a % rank for a in axes):
        out.insert(a, 1)
    return [_known(tuple(out), ins[0].elem, ins[0].values)]


def _reshape(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    target, shape = ins[1].values, ins[0].shape
    if target is None:
        return [Known(None, ins[0].elem)]
    allowzero = int(_attr(node, "allowzero", 0))
    # a 0 copies the input's dim (unless allowzero): not known where the input's shape is not
    out: list[Dim] = [
        (shape[i] if shape is not None and i < len(shape) else None) if d == 0 and not allowzero else d
        for i, d in enumerate(target)
    ]
    if -1 in out:
        rest = [d for d in out if d != -1]
        total = element_count(shape)
        known_rest = element_count(tuple(rest))
        out[out.index(-1)] = total // known_rest if total is not None and known_rest else None
    return [_known(tuple(out), ins[0].elem, ins[0].values)]


def _expand(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    target = ins[1].values
    shape = broadcast(ins[0].shape, target) if target is not None else None
    n, values = element_count(shape), None
    if ins[0].fill is not None and n is not None:
        values = (ins[0].fill,) * n
    elif ins[0].values is not None and shape == ins[0].shape:
        values = ins[0].values
    out = _known(shape, ins[0].elem, values)
    return [Known(out.shape, out.elem, out.values, ins[0].fill)]


def _constant_of_shape(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    value = _attr(node, "value", None)
    fill = of_tensor(value) if isinstance(value, onnx.TensorProto) else Known((1,), TensorProto.FLOAT)
    shape = ins[0].values
    if shape is None:
        return [Known(None, fill.elem)]
    n = element_count(shape)
    values = (fill.fill,) * n if fill.fill is not None and n is not None else None
    out = _known(shape, fill.elem, values)
    return [Known(out.shape, out.elem, out.values, fill.fill)]


def _slice(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    """Elements of a 1-D value sliced by constants (shapes of anything else: not known)."""
    data = ins[0]
    args = [_optional_input(node, ins, i) for i in range(1, 5)]
    bounds = [None if a is None else _ints_of(a) for a in args]
    starts, ends = bounds[0], bounds[1]
    axes = [0] if args[2] is None else bounds[2]
    steps = [1] if args[3] is None else bounds[3]
    if data.shape is None or len(data.shape) != 1 or data.values is None:
        return [UNKNOWN]
    if starts is None or ends is None or axes is None or steps is None or axes not in ([0], [-1]):
        return [UNKNOWN]
    values = data.values[slice(starts[0], ends[0], steps[0])]
    return [_known((len(values),), data.elem, values)]


def _arith(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    a, b = ins[0], ins[1]
    shape = broadcast(a.shape, b.shape)
    elem = TensorProto.BOOL if node.op_type in ("Equal", "Less", "Greater") else a.elem
    if a.static and b.static and a.elem in INTS and a.elem != TensorProto.BOOL:
        x, y = a.array(), b.array()
        if node.op_type == "Div":
            if not np.all(y):
                return [Known(shape, elem)]
            out = np.trunc(x / y).astype(x.dtype)  # integer Div truncates, as ONNX Runtime computes it
        else:
            out = _ARITH[node.op_type](x, y)
        return [_known(tuple(out.shape), elem, tuple(int(v) for v in out.reshape(-1)))]
    return [Known(shape, elem)]


_ARITH = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Min": np.minimum,
    "Max": np.maximum,
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
}


def _transpose(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    shape = ins[0].shape
    if shape is None:
        return [UNKNOWN]
    perm = _attr(node, "perm", None) or list(reversed(range(len(shape))))
    return [Known(tuple(shape[p] for p in perm), ins[0].elem)]  # type: ignore[union-attr]


def _split(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    shape = ins[0].shape
    n = len(node.output)
    if shape is None:
        return [UNKNOWN] * n
    axis = int(_attr(node, "axis", 0)) % len(shape)
    given, dim = _optional_input(node, ins, 1), shape[axis]
    sizes: list[Dim] | None = None if given is None else _ints_of(given)  # type: ignore[assignment]
    if given is None:
        sizes = [dim // n] * n if isinstance(dim, int) and dim % n == 0 else [None] * n
    if sizes is None or len(sizes) != n:
        return [Known(None, ins[0].elem)] * n
    return [Known(shape[:axis] + (size,) + shape[axis + 1 :], ins[0].elem) for size in sizes]


def _recurrent(node: onnx.NodeProto, ins: list[Known]) -> list[Known]:
    """LSTM/GRU/RNN (layout 0): X [seq, batch, input] -> Y [seq, dirs, batch, hidden], Y_h (Y_c)
    [dirs, batch, hidden]."""
    x = ins[0].shape
    if x is None or len(x) != 3 or int(_attr(node, "layout", 0)) != 0:
        return [UNKNOWN] * len(node.output)
    dirs = 2 if _attr(node, "direction", b"forward") == b"bidirectional" else 1
    hidden = _attr(node, "hidden_size", None)
    y = Known((x[0], dirs, x[1], hidden), ins[0].elem)  # type: ignore[arg-type]
    last = Known((dirs, x[1], hidden), ins[0].elem)  # type: ignore[arg-type]
    return [y] + [last] * (len(node.output) - 1)


_RULES: dict[str, Rule] = {
    "Shape": _shape,
    "Identity": _same,
    "Cast": _same,
    "Gather": _gather,
    "Concat": _concat,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Reshape": _reshape,
    "Expand": _expand,
    "ConstantOfShape": _constant_of_shape,
    "Slice": _slice,
    "Transpose": _transpose,
    "Split": _split,
    "LSTM": _recurrent,
    "GRU": _recurrent,
    "RNN": _recurrent,
    "Constant": lambda node, ins: [of_tensor(_attr(node, "value"))] if _attr(node, "value") is not None else [],  # type: ignore[arg-type]
    **{op: _arith for op in ("Add", "Sub", "Mul", "Div", "Min", "Max", "Equal", "Less", "Greater")},
    **{
        op: _unary
        for op in ("Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Clip")
    },
}

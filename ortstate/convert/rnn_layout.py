"""Shared math of the recurrent family (LSTM, GRU, RNN): gate orders, bias layout, axis orders.

Layouts mapped between (ONNX Runtime's CPU kernels reject ``layout=1``, so ONNX is sequence-major)::

    OpenVINO (batch-major)                        ONNX (layout=0)
    X   [batch, seq, input]                       X         [seq, batch, input]
    H0  [batch, num_dir, hidden]  (and C0)        initial_h [num_dir, batch, hidden]
    W   [num_dir, gates*hidden, input]            W         [num_dir, gates*hidden, input]   rows in ONNX gate order
    R   [num_dir, gates*hidden, hidden]           R         [num_dir, gates*hidden, hidden]
    B   [num_dir, gates*hidden]                   B         [num_dir, 2*gates*hidden] = [Wb, Rb]
    Y   [batch, num_dir, seq, hidden]             Y         [seq, num_dir, batch, hidden]
    Ho  [batch, num_dir, hidden]  (and Co)        Y_h       [num_dir, batch, hidden]

Cells have neither ``num_dir`` nor ``seq``: X [batch, input], H0 [batch, hidden], W [gates*hidden, input],
B [gates*hidden]; they become one-step forward sequences. OpenVINO's B already holds Wb + Rb, so it
becomes ONNX ``Wb`` with ``Rb = 0`` -- except GRU with ``linear_before_reset``, whose OpenVINO B is
[Wb_z+Rb_z, Wb_r+Rb_r, Wb_h, Rb_h] (4*hidden) because Rb_h is applied inside the reset product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper

from .builder import GraphBuilder
from .context import Node

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "Family",
    "Float",
    "bias",
    "gate_order",
    "recurrent_attrs",
    "sequence_lens",
    "transpose",
    "weights",
]


@dataclass(frozen=True)
class Family:
    """One recurrent op family. Gate orders are named formats: each letter is one gate's block of rows."""

    onnx_op: str
    ov_gates: str
    onnx_gates: str
    activations: tuple[str, ...]  # OpenVINO's (and ONNX's) defaults; also the required count

    @property
    def gates(self) -> int:
        return len(self.ov_gates)


LSTM = Family("LSTM", ov_gates="fico", onnx_gates="iofc", activations=("sigmoid", "tanh", "tanh"))
GRU = Family("GRU", ov_gates="zrh", onnx_gates="zrh", activations=("sigmoid", "tanh"))
RNN = Family("RNN", ov_gates="h", onnx_gates="h", activations=("tanh",))

# OpenVINO's activation functions (op/util/activation_functions.cpp) and their ONNX spellings.
_ACTIVATIONS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "hardsigmoid": "HardSigmoid"}
_ALPHA_BETA = {"hardsigmoid": (0.2, 0.5)}  # defaults, shared by both sides


def gate_order(src: str, dst: str) -> list[int]:
    """Indices of ``src``'s gate blocks in ``dst`` order: ``gate_order("fico", "iofc") == [1, 3, 0, 2]``."""
    return [src.index(gate) for gate in dst]


def reorder_gates(value: np.ndarray, family: Family, axis: int) -> np.ndarray:
    blocks = np.split(value, family.gates, axis=axis)
    return np.concatenate([blocks[i] for i in gate_order(family.ov_gates, family.onnx_gates)], axis=axis)


def _reorder_value(b: GraphBuilder, value: str, family: Family, axis: int) -> str:
    order = gate_order(family.ov_gates, family.onnx_gates)
    if order == list(range(family.gates)):  # GRU and RNN: same order on both sides
        return value
    blocks = b.op("Split", [value], {"axis": axis, "num_outputs": family.gates}, outputs=family.gates)
    return b.op("Concat", [blocks[i] for i in order], {"axis": axis})


def _zeros_like(b: GraphBuilder, value: str) -> str:
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])
    return b.op("ConstantOfShape", [b.op("Shape", [value])], {"value": zero})


def transpose(b: GraphBuilder, value: str, perm: list[int]) -> str:
    return b.op("Transpose", [value], {"perm": perm})


class Float:
    """ORT's recurrent kernels compute in f32: f16 values are cast in and out, f32 pass through."""

    def __init__(self, node: Node, b: GraphBuilder) -> None:
        self.carrier = node.onnx_input_type(0)
        if self.carrier not in (TensorProto.FLOAT, TensorProto.FLOAT16):
            raise node.error(f"X element type {node.input_type(0).name} is not supported (expected f32, bf16 or f16)")
        self.b = b

    def into(self, value: str) -> str:
        if self.carrier == TensorProto.FLOAT:
            return value
        return self.b.op("Cast", [value], {"to": TensorProto.FLOAT})

    def out(self, value: str) -> str:
        if self.carrier == TensorProto.FLOAT:
            return value
        return self.b.op("Cast", [value], {"to": self.carrier})


def _check_rows(node: Node, index: int, what: str, shape: tuple[int, ...], want: list[int | None]) -> None:
    ok = len(shape) == len(want) and all(w is None or s == w for s, w in zip(shape, want))
    if not ok:
        expected = "[" + ", ".join("?" if w is None else str(w) for w in want) + "]"
        raise node.error(f"input {index} ({what}) expected shape {expected}, got {list(shape)}")


def weights(
    node: Node, fl: Float, index: int, what: str, family: Family, hidden: int, num_dir: int, *, cell: bool
) -> str:
    """W or R (input ``index``) as ONNX wants it: rows reordered to ONNX gate order, ``num_dir`` leading.

    A constant is reordered now, in numpy; anything else by Split + Concat at run time.
    """
    value = node.const(index)
    if value is not None:
        arr = np.asarray(value, dtype=np.float32)
        arr = arr[None] if cell else arr
        _check_rows(node, index, what, arr.shape, [num_dir, family.gates * hidden, None])
        return fl.b.const(reorder_gates(arr, family, axis=1), hint=f"{node.layer.name}:{what}")
    v = fl.into(node.inputs[index])
    if cell:
        v = fl.b.op("Unsqueeze", [v, fl.b.const(np.array([0], np.int64))])
    return _reorder_value(fl.b, v, family, axis=1)


def onnx_bias_array(value: np.ndarray, family: Family, linear_before_reset: bool) -> np.ndarray:
    """OpenVINO B [num_dir, rows] -> ONNX B [num_dir, 2*gates*hidden] = [Wb, Rb]."""
    if linear_before_reset:
        z, r, wh, rh = np.split(value, 4, axis=1)
        zero = np.zeros_like(z)
        return np.concatenate([z, r, wh, zero, zero, rh], axis=1)
    wb = reorder_gates(value, family, axis=1)
    return np.concatenate([wb, np.zeros_like(wb)], axis=1)


def bias(
    node: Node, fl: Float, index: int, family: Family, hidden: int, num_dir: int, *, cell: bool, lbr: bool = False
) -> str:
    """ONNX ``B`` from OpenVINO's input ``index`` ("" when a cell has none: ONNX defaults to zeros)."""
    if index >= len(node.inputs):
        return ""
    rows = (family.gates + int(lbr)) * hidden
    value = node.const(index)
    if value is not None:
        arr = np.asarray(value, dtype=np.float32)
        arr = arr[None] if cell else arr
        _check_rows(node, index, "B", arr.shape, [num_dir, rows])
        return fl.b.const(onnx_bias_array(arr, family, lbr), hint=f"{node.layer.name}:B")
    b = fl.b
    v = fl.into(node.inputs[index])
    if cell:
        v = b.op("Unsqueeze", [v, b.const(np.array([0], np.int64))])
    if lbr:
        z, r, wh, rh = b.op("Split", [v], {"axis": 1, "num_outputs": 4}, outputs=4)
        zero = _zeros_like(b, z)
        return b.op("Concat", [z, r, wh, zero, zero, rh], {"axis": 1})
    wb = _reorder_value(b, v, family, axis=1)
    return b.op("Concat", [wb, _zeros_like(b, wb)], {"axis": 1})


def sequence_lens(node: Node, b: GraphBuilder, index: int) -> str:
    """OpenVINO ``seq_lengths`` (any integer type) -> ONNX ``sequence_lens`` (int32).

    Omitted when it is a constant equal to X's static sequence length everywhere, as often written.
    """
    value = node.const(index)
    dims = node.input_shape(0).dims
    if value is not None and dims is not None and len(dims) == 3 and dims[1].is_static:
        if np.all(np.asarray(value) == dims[1].lo):
            return ""
    if node.onnx_input_type(index) == TensorProto.INT32:
        return node.inputs[index]
    return b.op("Cast", [node.inputs[index]], {"to": TensorProto.INT32})


def _floats(node: Node, name: str) -> list[float]:
    raw = node.attr(name, "")
    try:
        return [float(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise node.error(f"attribute '{name}' expected numbers, got {raw!r}") from None


def recurrent_attrs(node: Node, family: Family, hidden: int, direction: str) -> dict[str, object]:
    """``hidden_size``, ``direction``, ``clip`` and the activations with their alphas and betas.

    OpenVINO indexes ``activations_alpha``/``beta`` by activation position; ONNX consumes them in order,
    only for functions that take them; ONNX Runtime wants every list repeated per direction.
    """
    names = [a.strip().lower() for a in node.attr("activations", "").split(",") if a.strip()]
    names = names or list(family.activations)
    if len(names) != len(family.activations):
        raise node.error(f"attribute 'activations' expected {len(family.activations)} functions, got {names}")
    alphas, betas = _floats(node, "activations_alpha"), _floats(node, "activations_beta")
    onnx_names: list[str] = []
    onnx_alpha: list[float] = []
    onnx_beta: list[float] = []
    for i, name in enumerate(names):
        if name not in _ACTIVATIONS:
            raise node.error(f"activation '{name}' is not supported (expected one of {', '.join(_ACTIVATIONS)})")
        onnx_names.append(_ACTIVATIONS[name])
        if name in _ALPHA_BETA:
            alpha, beta = _ALPHA_BETA[name]
            onnx_alpha.append(alphas[i] if len(alphas) > i else alpha)
            onnx_beta.append(betas[i] if len(betas) > i else beta)
    num_dir = 2 if direction == "bidirectional" else 1
    attrs: dict[str, object] = {"hidden_size": hidden, "direction": direction, "activations": onnx_names * num_dir}
    if onnx_alpha:
        attrs["activation_alpha"] = onnx_alpha * num_dir
        attrs["activation_beta"] = onnx_beta * num_dir
    clip = node.attr_float("clip", 0.0)
    if clip < 0:
        raise node.error(f"attribute 'clip' expected a value >= 0, got {clip}")
    if clip > 0:
        attrs["clip"] = clip
    return attrs

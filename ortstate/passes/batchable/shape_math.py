"""Shape arithmetic folded before the batch is followed: what every run computes the same way.

:func:`~ortstate.passes.fold_static` folds what ortstate's own symbolic shapes know; on top of it,
small integer tensors computed from constants and from the static dims ONNX shape inference finds
(a traced cell's split sizes: ``Where``, ``Mod``, ``ReduceSum``... of the width of a ``MatMul``)
are evaluated by ONNX's reference implementation and become initializers, so that shape inference
can then follow the batch through the ops they steer (a ``Split`` by computed sizes). Every rewrite
is exact: only values that are the same numbers in every run are folded.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ..fold import fold_static
from ..walk import subgraphs
from .axes import Dims, infer_dims, light_copy

__all__ = ["fold_shape_math"]

_SMALL = 64  # integer tensors evaluated here: shapes, sizes, lengths


def fold_shape_math(model: onnx.ModelProto) -> None:
    """Fold, in place, what every run computes the same way: :func:`~ortstate.passes.fold_static`'s
    shapes, and small integer tensors computed from constants and the static dims ONNX shape
    inference finds (a traced cell's split sizes: ``Where``, ``Mod``, ``ReduceSum``... of the
    width of a ``MatMul``), evaluated by ONNX's reference."""
    for _ in range(8):
        if not fold_static(model.graph) + _evaluate_constants(model):
            return


def _evaluate_constants(model: onnx.ModelProto) -> int:
    """One round: small integer tensors known element by element (a symbol where a dim is one), and
    the nodes whose outputs are all numbers become initializers; returns how many nodes did."""
    graph = model.graph
    shapes = infer_dims(light_copy(model))
    fed = {i.name for i in graph.input}  # an overridable initializer: the feed wins
    known: dict[str, np.ndarray] = {
        t.name: numpy_helper.to_array(t)
        for t in graph.initializer
        if t.name not in fed and t.data_type != TensorProto.STRING and int(np.prod(t.dims)) <= _SMALL
    }
    ends = {o.name for o in graph.output}
    types: dict[str, np.dtype] = {}  # the integer dtype of each value with a symbol in it
    kept, changed = [], 0
    for node in graph.node:
        outs = (
            _values(model, node, known, types, shapes)
            if node.domain in ("", "ai.onnx") and not subgraphs(node)
            else None
        )
        if outs is None:
            kept.append(node)
            continue
        known.update(zip(node.output, outs))
        if any(v.dtype == object for v in outs) or ends & set(node.output) or node.op_type == "Constant":
            kept.append(node)  # a value with a symbol in it stays computed
            continue
        graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in zip(node.output, outs))
        changed += 1
    if changed:
        del graph.node[:]
        graph.node.extend(kept)
    return changed


def _values(
    model: onnx.ModelProto,
    node: onnx.NodeProto,
    known: dict[str, np.ndarray],
    types: dict[str, np.dtype],
    shapes: dict[str, Dims],
) -> list[np.ndarray] | None:
    """``node``'s outputs element by element (object arrays where a symbol is in them), or None."""
    op, ins = node.op_type, [n for n in node.input if n]
    if op == "Shape":
        dims = shapes.get(node.input[0])
        if dims is None or None in dims:
            return None
        attrs = {a.name: a.i for a in node.attribute}
        part = dims[attrs.get("start", 0) : attrs.get("end", len(dims))]
        numbers = all(isinstance(d, int) for d in part)
        return [np.array(part, np.int64 if numbers else object)]
    if not ins or any(n not in known for n in ins) or op.startswith("Random"):
        return None
    values = [known[n] for n in ins]
    if any(v.dtype == object for v in values):
        return _symbolic(node, values, types)
    return _evaluate(model, node, dict(zip(ins, values)))


def _symbolic(node: onnx.NodeProto, values: list[np.ndarray], types: dict[str, np.dtype]) -> list[np.ndarray] | None:
    """The ops that move a shape's elements without computing on them, on a shape with symbols
    (an object array, its integer dtype in ``types``): numbers again where no symbol is left."""
    op, data = node.op_type, values[0]
    dtype = types.get(node.input[0], np.dtype(np.int64))
    if op in ("Cast", "Identity") and data.ndim <= 1:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        dtype = dtype if to is None else helper.tensor_dtype_to_np_dtype(to)
        out = data if dtype.kind == "i" else None
    elif op == "Gather" and data.ndim == 1 and values[1].dtype != object:
        out = np.array(data[values[1].astype(np.int64)], dtype=object)
    elif op == "Concat" and all(v.ndim == 1 for v in values):
        out = np.concatenate([v.astype(object) for v in values])
    else:
        out = None
    if out is None:
        return None
    if any(isinstance(v, str) for v in out.reshape(-1)):
        types[node.output[0]] = dtype
        return [out]
    return [out.astype(dtype)]


def _evaluate(model: onnx.ModelProto, node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()
    ]
    outputs = [helper.make_empty_tensor_value_info(n) for n in node.output]
    one = helper.make_model(helper.make_graph([node], "constant", inputs, outputs), opset_imports=model.opset_import)
    try:
        values = [np.asarray(v) for v in ReferenceEvaluator(one).run(None, feeds)]
    except Exception:  # noqa: BLE001 - an op the reference lacks, or a node ONNX Runtime would refuse
        return None
    if len(values) != len(outputs) or any(v.size > _SMALL or v.dtype.kind not in "iub" for v in values):
        return None  # only shape arithmetic is folded here, never real compute
    return values

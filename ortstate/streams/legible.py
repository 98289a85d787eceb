"""What ONNX shape inference cannot see by itself in a model, told it (for shape inference only:
in the copy :func:`~.batch_axes.light_copy` makes): slices of run-time bounds, loop-carried values.

Slices with bounds known only at run time.

ONNX shape inference gives a ``Slice`` whose starts or ends are not constant an output of unknown
dims, all of them, though only the sliced axes can change: the batch is lost there. That is the
slice a TensorIterator or Loop body takes of its input at each iteration (starts: the iteration
number), so a LowLatency2 model's batch could not be followed through its body. For shape
inference only (the copy :func:`~.batch_axes.light_copy` makes), each such slice with constant
``axes`` becomes a ``Gather`` per sliced axis of a ``Range`` of run-time length: the same dims off
the sliced axes, an unknown dim on each of them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..passes.walk import subgraphs

__all__ = ["legible_slices", "typed_loops"]

Dims = tuple[int | str | None, ...]

_PREFIX = "ortstate.infer.slice"
_ASSUMED, _VARIES = "ortstate: the initial value's shape, assumed", "ortstate: its shape varies"


def legible_slices(model: onnx.ModelProto) -> None:
    """Rewrite, in place, every Slice of ``model`` (subgraphs included) whose starts or ends are
    computed and whose axes are an initializer, as described in the module."""
    constants = _constants(model.graph)
    count = 0
    for graph in reversed(_graphs(model.graph)):  # inner first: rewriting a graph copies its nodes
        axes_of = {t.name: t for t in graph.initializer}
        out: list[onnx.NodeProto] = []
        for node in graph.node:
            inputs = list(node.input) + [""] * (5 - len(node.input))
            data, starts, ends, axes = inputs[:4]
            if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or not axes or axes not in axes_of:
                out.append(node)
                continue
            if starts in constants and ends in constants:
                out.append(node)
                continue
            count += 1
            out.extend(_gathers(node, data, starts, ends, numpy_helper.to_array(axes_of[axes]), f"{_PREFIX}.{count}"))
        if len(out) != len(graph.node):
            del graph.node[:]
            graph.node.extend(out)


def _gathers(
    node: onnx.NodeProto, data: str, starts: str, ends: str, axes: np.ndarray, prefix: str
) -> list[onnx.NodeProto]:
    """``node``'s stand-in: for each sliced axis, a Gather along it of indices of run-time length."""
    made = []
    current = data
    for k, axis in enumerate(axes.reshape(-1).tolist()):
        at = f"{prefix}.{k}"
        made += [
            helper.make_node(
                "Constant", [], [f"{at}.k"], value=helper.make_tensor(f"{at}.k", onnx.TensorProto.INT64, [], [k])
            ),
            helper.make_node(
                "Constant", [], [f"{at}.one"], value=helper.make_tensor(f"{at}.one", onnx.TensorProto.INT64, [], [1])
            ),
        ]
        for name, bounds in (("start", starts), ("end", ends)):
            made.append(helper.make_node("Gather", [bounds, f"{at}.k"], [f"{at}.{name}"]))
            made.append(helper.make_node("Cast", [f"{at}.{name}"], [f"{at}.{name}64"], to=onnx.TensorProto.INT64))
        made.append(helper.make_node("Range", [f"{at}.start64", f"{at}.end64", f"{at}.one"], [f"{at}.indices"]))
        last = k == len(axes.reshape(-1)) - 1
        target = node.output[0] if last else f"{at}.out"
        made.append(
            helper.make_node(
                "Gather",
                [current, f"{at}.indices"],
                [target],
                name=node.name,
                doc_string=node.doc_string,
                axis=int(axis),
            )
        )
        current = target
    return made


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    found = [graph]
    for node in graph.node:
        for sub in subgraphs(node):
            found += _graphs(sub)
    return found


def _constants(graph: onnx.GraphProto) -> set[str]:
    """The names of every initializer and Constant output, in every scope."""
    names: set[str] = set()
    for g in _graphs(graph):
        names.update(t.name for t in g.initializer)
        names.update(o for n in g.node if n.op_type == "Constant" for o in n.output)
    return names


def typed_loops(model: onnx.ModelProto, inferred: onnx.GraphProto, shapes: Mapping[str, Dims]) -> bool:
    """Type each Loop's loop-carried values in ``model`` (the copy shape inference ran on, giving
    ``inferred`` and its values' ``shapes``) where their shape holds through every iteration: ONNX
    types them without a shape, as a shape may change between iterations. First the body's input
    is given its initial value's type; once inference shows the body giving the value back with
    those very dims, every iteration does, and the loop's output gets them too; where it does not,
    the body's input goes back to no shape (and is not tried again). True where anything changed
    (then infer again)."""
    types: dict[str, onnx.TypeProto] = {}
    for g in _graphs(inferred):
        for value in [*g.input, *g.value_info, *g.output]:
            types.setdefault(value.name, value.type)
    changed = False
    for graph in _graphs(model.graph):
        outputs = {o.name: o for o in graph.output}
        typed = {v.name for v in graph.value_info}
        for node in graph.node:
            if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
                continue
            body = subgraphs(node)[0]
            for k, out in enumerate(node.output[: len(node.input) - 2]):
                init, carried, back = node.input[2 + k], body.input[2 + k], body.output[1 + k].name
                dims = shapes.get(init)
                if dims is None or None in dims or init not in types or carried.doc_string == _VARIES:
                    continue
                if not carried.type.tensor_type.HasField("shape"):
                    carried.type.CopyFrom(types[init])  # assumed: checked once inferred
                    carried.doc_string = _ASSUMED
                    changed = True
                elif carried.doc_string == _ASSUMED and shapes.get(back) != dims:
                    carried.type.tensor_type.ClearField("shape")
                    carried.doc_string = _VARIES
                    changed = True
                elif (
                    shapes.get(back) == dims
                    and out
                    and shapes.get(out) != dims
                    and (out in outputs or out not in typed)
                ):
                    if out in outputs:
                        outputs[out].type.CopyFrom(types[init])
                    else:
                        graph.value_info.append(helper.make_value_info(out, types[init]))
                    changed = True
    return changed

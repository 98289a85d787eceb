"""What ONNX shape inference cannot see by itself in a model, told it (for shape inference only:
in the copy :func:`~.axes.light_copy` makes): slices of run-time bounds, loop-carried values,
ONNX Runtime's kernels of the ONNX domain that ONNX does not define.

ONNX Runtime's own kernels.

ONNX shape inference gives an op it has no schema for an output of unknown shape: the batch is
lost at ONNX Runtime's ``SimplifiedLayerNormalization`` (the RMS norm the converter writes, an
ONNX-domain kernel of ONNX Runtime's). Each such node of :data:`SAME_SHAPE` (a kernel whose one
output has its first input's shape and type) becomes an ``Identity`` of that input.

Pads and shapes computed at run time.

Two more, once a shape inference has given the values' dims (:func:`legible_shapes`, then infer
again): a ``Pad`` whose pads are computed keeps every dim whose two pads are constant zeros (the
pads' entries followed through ``Concat``, ``Reshape``, ``Split``, ``Squeeze``, ``Unsqueeze`` and
``Cast`` from constants: a causal convolution pads its time axis only), the others becoming unknown
as for a slice; and a ``Reshape`` of a 1-D value to one entry (``[-1]``) is a ``Concat`` of it
alone, which data propagation follows (a shape read with ``Shape``, reshaped, then a target).

Slices with bounds known only at run time.

ONNX shape inference gives a ``Slice`` whose starts or ends are not constant an output of unknown
dims, all of them, though only the sliced axes can change: the batch is lost there. That is the
slice a TensorIterator or Loop body takes of its input at each iteration (starts: the iteration
number), so a LowLatency2 model's batch could not be followed through its body. For shape
inference only (the copy :func:`~.axes.light_copy` makes), each such slice with constant
``axes`` becomes a ``Gather`` per sliced axis of a ``Range`` of run-time length: the same dims off
the sliced axes, an unknown dim on each of them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..walk import graphs, subgraphs

__all__ = ["SAME_SHAPE", "legible_kernels", "legible_shapes", "legible_slices", "typed_loops"]

Dims = tuple[int | str | None, ...]

_PREFIX = "ortstate.infer.slice"
# ONNX Runtime's kernels in the ONNX domain (no ONNX schema) whose one output is shaped as input 0
SAME_SHAPE = frozenset({"SimplifiedLayerNormalization"})
_ASSUMED, _VARIES = "ortstate: the initial value's shape, assumed", "ortstate: its shape varies"


def legible_slices(model: onnx.ModelProto) -> None:
    """Rewrite, in place, every Slice of ``model`` (subgraphs included) whose starts or ends are
    computed and whose axes are an initializer, as described in the module."""
    constants = _constants(model.graph)
    count = 0
    for graph in reversed(graphs(model.graph)):  # inner first: rewriting a graph copies its nodes
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


def legible_kernels(model: onnx.ModelProto) -> None:
    """Make, in place, every node of :data:`SAME_SHAPE` in ``model`` (subgraphs included) with one
    output and no ONNX schema an ``Identity`` of its first input, as described in the module."""
    for graph in graphs(model.graph):
        for node in graph.node:
            if (
                node.op_type in SAME_SHAPE
                and node.domain in ("", "ai.onnx")
                and len(node.output) == 1
                and not onnx.defs.has(node.op_type)
            ):
                node.op_type = "Identity"
                del node.input[1:]
                del node.attribute[:]


def legible_shapes(model: onnx.ModelProto, shapes: Mapping[str, Dims]) -> bool:
    """Rewrite, in place, the Pads and Reshapes of ``model``'s main graph described in the module,
    given every value's ``shapes`` as inferred; True where anything changed (then infer again)."""
    graph = model.graph
    made_by = {o: n for n in graph.node for o in n.output}
    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    out: list[onnx.NodeProto] = []
    changed = False
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            out.append(node)
        elif (
            node.op_type == "Reshape"
            and len(shapes.get(node.input[0]) or ()) == 1
            and _entries(node.input[1], made_by, known, shapes) in ([-1], [shapes[node.input[0]][0]])
        ):
            out.append(helper.make_node("Concat", node.input[:1], node.output, name=node.name, axis=0))
            changed = True
        elif node.op_type == "Pad" and len(node.input) > 1 and node.input[1] not in known:
            rank = len(shapes.get(node.input[0]) or ())
            pads = _entries(node.input[1], made_by, known, shapes)
            if not rank or pads is None or len(pads) != 2 * rank or None not in pads:  # ONNX's own then
                out.append(node)
                continue
            axes = [a for a in range(rank) if pads[a] != 0 or pads[a + rank] != 0]
            out.extend(_unknown_along(node, axes, f"{_PREFIX}.pad.{len(out)}"))
            changed = True
        else:
            out.append(node)
    if changed:
        del graph.node[:]
        graph.node.extend(out)
    return changed


def _unknown_along(node: onnx.NodeProto, axes: list[int], at: str) -> list[onnx.NodeProto]:
    """A Pad ``node``'s stand-in: its input with a dim of run-time length (unknown to inference) on
    each of ``axes``, the others kept."""
    made = [
        helper.make_node("ReduceMax", node.input[1:2], [f"{at}.n"], keepdims=0),
        helper.make_node("Cast", [f"{at}.n"], [f"{at}.n64"], to=onnx.TensorProto.INT64),
        helper.make_node("Constant", [], [f"{at}.zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Constant", [], [f"{at}.one"], value=numpy_helper.from_array(np.array(1, np.int64))),
        helper.make_node("Range", [f"{at}.zero", f"{at}.n64", f"{at}.one"], [f"{at}.indices"]),
    ]
    current = node.input[0]
    for k, axis in enumerate(axes):
        target = node.output[0] if k == len(axes) - 1 else f"{at}.{k}"
        made.append(helper.make_node("Gather", [current, f"{at}.indices"], [target], name=node.name, axis=axis))
        current = target
    if not axes:
        made.append(helper.make_node("Identity", node.input[:1], node.output, name=node.name))
    return made


def _entries(
    name: str, made_by: Mapping[str, onnx.NodeProto], known: Mapping[str, np.ndarray], shapes: Mapping[str, Dims]
) -> list[int | None] | None:
    """The entries of the small integer value ``name``, each an int where constants give it, else
    None; None where its shape is not known."""
    value = _partial(name, made_by, known, shapes, 0)
    return None if value is None else [None if v is None else int(v) for v in value.reshape(-1).tolist()]


def _partial(
    name: str,
    made_by: Mapping[str, onnx.NodeProto],
    known: Mapping[str, np.ndarray],
    shapes: Mapping[str, Dims],
    depth: int,
) -> np.ndarray | None:
    """``name``'s value as an object array (None: an entry not known), or None where not followed."""
    if name in known:
        return known[name].astype(object)
    node = made_by.get(name)
    dims = shapes.get(name)
    if node is not None and node.op_type == "Constant" and node.attribute[0].name == "value":
        return numpy_helper.to_array(node.attribute[0].t).astype(object)
    args = []
    if node is not None and depth < _DEPTH and node.op_type in _FOLLOWED:
        args = [_partial(i, made_by, known, shapes, depth + 1) for i in node.input]
    if args and all(a is not None for a in args):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        got = _FOLLOWED[node.op_type](list(node.output).index(name), args, attrs)
        if got is not None and (dims is None or got.shape == tuple(dims)):
            return got
    if dims is None or not all(isinstance(d, int) for d in dims) or int(np.prod(dims)) > _SMALL:
        return None
    return np.full(dims, None, object)  # a value of known shape, its entries not known


def _split(k: int, args: list[np.ndarray], attrs: dict) -> np.ndarray | None:
    """Output ``k`` of a Split with constant sizes."""
    sizes = args[1].tolist() if len(args) > 1 else None
    if sizes is None or None in sizes:
        return None
    return np.split(args[0], np.cumsum(sizes)[:-1].tolist(), axis=int(attrs.get("axis", 0)))[k]


def _reshape(k: int, args: list[np.ndarray], attrs: dict) -> np.ndarray | None:
    """A Reshape to a constant target (0: the input's dim there)."""
    target = args[1].tolist()
    if None in target:
        return None
    return args[0].reshape([args[0].shape[i] if v == 0 else int(v) for i, v in enumerate(target)])


_DEPTH, _SMALL = 16, 64  # how far back a value's entries are followed; the most entries followed
_FOLLOWED = {
    "Concat": lambda k, a, at: np.concatenate(a, axis=int(at["axis"])),
    "Reshape": _reshape,
    "Split": _split,
    "Squeeze": lambda k, a, at: np.squeeze(a[0], axis=tuple(int(v) for v in a[1].tolist())) if len(a) > 1 else None,
    "Unsqueeze": lambda k, a, at: np.expand_dims(a[0], tuple(int(v) for v in a[1].tolist())),
    "Cast": lambda k, a, at: a[0],
}


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


def _constants(graph: onnx.GraphProto) -> set[str]:
    """The names of every initializer and Constant output, in every scope."""
    names: set[str] = set()
    for g in graphs(graph):
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
    for g in graphs(inferred):
        for value in [*g.input, *g.value_info, *g.output]:
            types.setdefault(value.name, value.type)
    changed = False
    for graph in graphs(model.graph):
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

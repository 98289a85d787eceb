"""Explicit form with KV buffers (after :func:`~.kv_share.share_kv`): a decode step of a grouped
attention (more query heads than KV heads) reads each KV head once instead of once per query head.

ONNX Runtime's CPU ``GroupQueryAttention`` attends each query head to its KV head on its own: with
7 query heads per KV head (Qwen2-0.5B) it reads the whole cache 7 times a step, which is where a
long context's decode time goes. For a step of one new row, at ``_MIN_ROWS`` rows of context or
more, whose buffers have room, this pass runs the same attention as batched products over the KV
heads instead:

- the new key and value rows go into the buffers in place (``ScatterElements`` whose data and
  output are the same memory writes only the new rows: no copy of the cache);
- ``scores = FusedMatMul(query grouped [b, kv, group, size], key buffer, transB, alpha=scale)``,
  plus the kernel's ``attention_bias`` padded with ``-inf`` over the buffer's spare rows;
- ``Softmax``, then ``MatMul`` with the value buffer: [b, kv, group, size], the kernel's output.

Every other run (several new rows, a shorter context, buffers without room, a past of exactly its
length) takes the kernel as before: the converter's ``If(several rows in a batch, composition,
kernel)`` becomes ``If(that or grouped, If(grouped, products, composition), kernel)``, the condition
computed beside it, so the kernel's runs still pass one ``If`` (a second level cost 4-8 % a step at
short contexts). The spare rows are read, with weight 0: the runtime keeps them finite (zeros when
a buffer is made; written only with key and value rows).
A kernel with anything but ``num_heads``, ``kv_num_heads``, ``scale`` and ``causal=0`` (rotary,
local windows, softcap, sinks) is left alone, and so is one with fewer than ``_MIN_GROUP`` query
heads per KV head: reading the cache once instead of twice does not pay for the products, while
the condition (13 small nodes a layer) runs on every step, short contexts included. Done on load,
for a session's KV buffers only: an exported model keeps the kernel (another runtime's buffers may
hold anything in their spare rows).

``always`` drops both thresholds (any grouped kernel, every one-row step with room takes the
products): to measure or test them where the thresholds would keep the kernel. The runtime takes
the choice from ``ORTSTATE_GROUPED_DECODE`` (:data:`MODES`; ``ortstate.runtime.grouped_choice``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..meta import ModelMeta
from .build import NewNames, NodeWriter
from .walk import all_names, graphs, rename_in_nodes

__all__ = ["MODES", "group_decode"]

_MS = "com.microsoft"
_PAST_K, _PAST_V, _TOTAL, _BIAS = 3, 4, 6, 10  # GroupQueryAttention's inputs
_PLAIN = {"num_heads", "kv_num_heads", "scale", "causal"}
# From this many rows on the products are faster. On the real-size model (Qwen2-0.5B's shape, 14
# heads over 2, 2 threads; benchmarks/realsize_grouped.py, each session made first once) a step
# took 1.03-1.08x the kernel's at 1,024 rows, 0.91-0.98x at 2,048 and 0.89-0.92x at 4,000.
_MIN_ROWS = 2048
# From this many query heads per KV head on. The tiny llama (4 heads over 2, head size 16, 1
# thread, bound buffers; 2026-11-27): the products took 1.07x the kernel's step at 2,100 rows and
# 1.02x at 4,000, and the condition alone 1.09x a step at 16 rows; Qwen2-0.5B's 7 over 1: above.
_MIN_GROUP = 4
#: How a session's load may take the products: by the thresholds above, wherever it can, or never.
MODES = ("auto", "on", "off")


def group_decode(model: onnx.ModelProto, meta: ModelMeta, always: bool = False) -> int:
    """Give every ``If`` whose else branch runs a grouped ``GroupQueryAttention`` over two shared KV
    variables the decode branch described above, in place; how many were given one. ``always``:
    without the row and group thresholds."""
    shared = {v.state_input for v in meta.variables if v.length_input and v.state_input}
    min_group, min_rows = (1, 0) if always else (_MIN_GROUP, _MIN_ROWS)
    taken = all_names(model.graph)
    done = 0
    for graph in reversed(graphs(model.graph)):  # inner graphs first: a rebuilt list copies its nodes
        found = {i: k for i, node in enumerate(graph.node) if (k := _kernel_of(node, shared, min_group)) is not None}
        if not found:
            continue
        rebuilt: list[onnx.NodeProto] = []
        for index, node in enumerate(graph.node):
            if index in found:
                rebuilt += _Branch(found[index], taken, min_rows).around(node)
                done += 1
            else:
                rebuilt.append(node)
        del graph.node[:]
        graph.node.extend(rebuilt)
    if done and not any(o.domain == _MS for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(_MS, 1))
    return done


def _kernel_of(node: onnx.NodeProto, shared: set[str], min_group: int) -> onnx.NodeProto | None:
    """The qualifying kernel an ``If``'s else branch runs at its top level, reading only values of
    the graph around the ``If`` (so the condition can be computed there); else None."""
    if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
        return None
    branch = next((a.g for a in node.attribute if a.name == "else_branch"), None)
    if branch is None:
        return None
    kernels = [n for n in branch.node if _qualifies(n, shared, min_group)]
    if len(kernels) != 1:
        return None
    made = {out for n in branch.node for out in n.output} | {i.name for i in branch.initializer}
    return None if any(name in made for name in kernels[0].input) else kernels[0]


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _qualifies(node: onnx.NodeProto, shared: set[str], min_group: int) -> bool:
    if node.op_type != "GroupQueryAttention" or node.domain != _MS or len(node.input) > _BIAS + 1:
        return False
    attrs = _attrs(node)
    heads, kv_heads, scale = attrs.get("num_heads"), attrs.get("kv_num_heads"), attrs.get("scale")
    if set(attrs) - _PLAIN or attrs.get("causal", 0) != 0 or not isinstance(scale, float) or scale <= 0:
        return False
    if not isinstance(heads, int) or not isinstance(kv_heads, int) or kv_heads < 1 or heads <= kv_heads:
        return False
    unused = [node.input[i] for i in (7, 8, 9) if i < len(node.input)]  # cos/sin caches, position ids
    grouped = heads % kv_heads == 0 and heads // kv_heads >= min_group and len(node.output) == 3
    return grouped and not any(unused) and node.input[_PAST_K] in shared and node.input[_PAST_V] in shared


class _Branch:
    """The nodes that replace the converter's ``If`` around one kernel: the grouped condition, and
    the widened ``If`` (see :meth:`around`)."""

    def __init__(self, kernel: onnx.NodeProto, taken: set[str], min_rows: int) -> None:
        self.kernel, self.min_rows = kernel, min_rows
        self.base = kernel.name or kernel.output[0]
        self.fresh = NewNames(taken)
        self._writer = NodeWriter(self.fresh, f"{self.base}/grouped")
        self.op, self.const = self._writer.op, self._writer.const
        attrs = _attrs(kernel)
        self.heads, self.kv_heads = int(attrs["num_heads"]), int(attrs["kv_num_heads"])  # type: ignore[call-overload]
        self.scale = float(attrs["scale"])  # type: ignore[arg-type]

    def around(self, outer: onnx.NodeProto) -> list[onnx.NodeProto]:
        """The condition's nodes, then ``If(outer's condition or grouped, If(grouped, products,
        outer's then), outer's else)``: the kernel's runs keep the one ``If`` they had."""
        kernel = self.kernel
        query, total = kernel.input[0], kernel.input[_TOTAL]
        past_k, past_v = kernel.input[_PAST_K], kernel.input[_PAST_V]
        # the condition: one new row, at least min_rows rows after it, and room for it in both buffers
        total64 = self.op("Reshape", [self.op("Cast", [total], to=onnx.TensorProto.INT64), self.const([1])])
        room = [self.op("LessOrEqual", [total64, self.op("Shape", [p], start=2, end=3)]) for p in (past_k, past_v)]
        one_row = self.op("Equal", [self.op("Shape", [query], start=1, end=2), self.const([1])])
        long = self.op("GreaterOrEqual", [total64, self.const([self.min_rows])])
        grouped = self.op("And", [self.op("And", [one_row, long]), self.op("And", room)])
        either = self.op("Or", [outer.input[0], grouped])
        conditions = self._writer.take()
        made = self._grouped(total64)
        products = self._writer.take()
        rename_in_nodes(products, dict(zip(made, self.kernel.output[:3])))  # the kernel's outputs, by their names
        then_old = next(a.g for a in outer.attribute if a.name == "then_branch")
        else_old = next(a.g for a in outer.attribute if a.name == "else_branch")
        copied = self._replace_kernel(else_old, products)
        inner_out = [self.fresh(f"{o}/either") for o in outer.output]
        inner = helper.make_node(
            "If",
            [grouped],
            inner_out,
            name=self.fresh(f"{self.base}/one_row"),
            then_branch=copied,
            else_branch=then_old,
        )
        branch = helper.make_node(
            "If",
            [either],
            list(outer.output),
            name=outer.name,
            then_branch=self.graph("grouped_or_composed", inner_out, [inner]),
            else_branch=else_old,
        )
        return [*conditions, branch]

    def _replace_kernel(self, branch: onnx.GraphProto, products: list[onnx.NodeProto]) -> onnx.GraphProto:
        """A copy of ``branch`` whose kernel is ``products`` (which make the kernel's outputs); every
        value made in it renamed, as a name may be defined once in a model."""
        nodes: list[onnx.NodeProto] = []
        for node in branch.node:
            if node.op_type == self.kernel.op_type and list(node.output) == list(self.kernel.output):
                nodes += products
                continue
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.name = self.fresh(f"{node.name or node.output[0]}/grouped")
            nodes.append(copy)
        made = [out for n in nodes if n not in products for out in n.output if out] + list(self.kernel.output)
        renames = {name: self.fresh(f"{name}/grouped") for name in made}
        rename_in_nodes(nodes, renames)
        outputs = [renames.get(o.name, o.name) for o in branch.output]
        graph = self.graph("grouped", outputs, nodes)
        graph.initializer.extend(branch.initializer)
        return graph

    def _grouped(self, total64: str) -> list[str]:
        """The grouped products; their outputs: the kernel's output, the two presents."""
        kernel, kv, group = self.kernel, self.kv_heads, self.heads // self.kv_heads
        query, key, value, past_k, past_v = kernel.input[:5]
        bias = kernel.input[_BIAS] if len(kernel.input) > _BIAS else ""
        to_rows = self.const([0, kv, 1, -1])  # [batch, 1, kv * size] -> [batch, kv, 1, size]
        position = self.op("Sub", [total64, self.const([1])])
        presents = []
        for new, past in ((key, past_k), (value, past_v)):
            rows = self.op("Reshape", [new, to_rows])
            where = self.op("Expand", [position, self.op("Shape", [rows])])
            presents.append(self.op("ScatterElements", [past, where, rows], axis=2))  # in place: past is present
        present_k, present_v = presents
        grouped_q = self.op("Reshape", [query, self.const([0, kv, group, -1])])
        scores = self.op("FusedMatMul", [grouped_q, present_k], domain=_MS, transB=1, alpha=self.scale)
        by_head = self.op("Reshape", [scores, self.const([0, self.heads, 1, -1])])  # [batch, heads, 1, capacity]
        capacity = self.op("Shape", [present_k], start=2, end=3)
        minus_inf = self.const(np.array(-np.inf, np.float32))
        if bias:  # [batch or 1, heads or 1, 1, total] -> -inf over the spare rows
            pads = self.op("Concat", [self.const([0] * 7), self.op("Sub", [capacity, total64])], axis=0)
            mask = self.op("Pad", [bias, pads, minus_inf])
        else:
            positions = self.op(
                "Range", [self.const(np.array(0)), self.op("Squeeze", [capacity]), self.const(np.array(1))]
            )
            mask = self.op(
                "Where", [self.op("Less", [positions, total64]), self.const(np.array(0, np.float32)), minus_inf]
            )
        weights = self.op("Softmax", [self.op("Add", [by_head, mask])], axis=-1)
        grouped_w = self.op("Reshape", [weights, self.const([0, kv, group, -1])])
        attended = self.op("MatMul", [grouped_w, present_v])  # [batch, kv, group, size]
        return [self.op("Reshape", [attended, self.const([0, 1, -1])]), present_k, present_v]

    def graph(self, what: str, outputs: list[str], nodes: list[onnx.NodeProto]) -> onnx.GraphProto:
        # float, as the kernel's (the converter writes it for f32 attention only)
        declared = [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in outputs]
        return helper.make_graph(nodes, self.fresh(f"{self.base}/{what}"), [], declared)

"""Explicit form, KV variables shared (:mod:`.kv_share`): one run steps a batch of streams whose
caches hold different numbers of rows, each stream's cache a row of one arena.

After :func:`~.kv_share.share_kv` the fused attention (``com.microsoft.GroupQueryAttention``)
reads every row's past as ``total_sequence_length - 1`` rows: one length for the batch. The
kernel itself takes a length per row (``seqlens_k``: row ``b`` has ``seqlens_k[b] + 1`` rows
after the run and appends its new rows there, in place), so a batch of streams of different
lengths is one run if each row is told its own. This pass gives the graph two inputs:

- ``ortstate.pool.seqlens_k`` (int32 ``[batch]``): each row's rows after the run, minus one,
  read by every fused attention instead of the length the graph computed;
- ``ortstate.pool.key_index`` (int64 ``[batch, 1, 1, total]``): where each row's key ``j`` sits
  in the mask the graph computes. The runtime feeds the batch as a left-padded one (each row's
  ``attention_mask`` padded with zeros in front to the longest row's width, as Hugging Face pads a
  batch of prompts), so the graph builds every row's mask (causal, sliding window, padding) at the
  right offset; the kernel reads a row's keys from its start, so its ``attention_bias`` is
  gathered along the key axis by ``key_index`` (``j + pad`` for the row's own keys).

A batch of one stream feeds ``seqlens_k = [total - 1]`` and ``key_index = arange(total)``: the
run is the one :mod:`.kv_share` runs. The composed branch of the attention ``If`` (several new
rows with a past in a batch above 1) keeps the batch's one length: the runtime never takes it.

A KV cache whose attention the converter left composed keeps no length input: the runtime feeds
it as a lone session does, each row's past right-aligned to the batch's longest (as the left-padded
mask says), and keeps the rows the run appended (:mod:`ortstate.streams.kv_copied`). A model
with no fused attention at all gets neither input.
"""

from __future__ import annotations

import dataclasses

import onnx
from onnx import helper

from ..errors import PassError
from ..meta import ModelMeta
from .build import namer
from .walk import graphs

__all__ = ["KEY_INDEX", "SEQLENS", "RaggedKv", "ragged_kv"]

SEQLENS = "ortstate.pool.seqlens_k"
KEY_INDEX = "ortstate.pool.key_index"
_PASTS = (3, 4)  # GroupQueryAttention's past_key, past_value
_SEQLENS_AT, _BIAS_AT = 5, 10


@dataclasses.dataclass(frozen=True)
class RaggedKv:
    """The inputs :func:`ragged_kv` gave the graph ("" each: none, the model has no fused attention),
    and how many fused attentions read them."""

    seqlens: str
    key_index: str
    attentions: int


def _kernels(model: onnx.ModelProto) -> list[tuple[onnx.GraphProto, int]]:
    return [
        (graph, k)
        for graph in graphs(model.graph)
        for k, node in enumerate(graph.node)
        if node.op_type == "GroupQueryAttention" and node.domain == "com.microsoft"
    ]


def ragged_kv(model: onnx.ModelProto, meta: ModelMeta) -> RaggedKv:
    """Give explicit ``model`` (its KV variables shared) the per-row inputs of the module docstring,
    in place.

    Raises:
        PassError: a variable with a length input that no fused attention reads (its length would
            be one per batch), before anything is changed.
    """
    kernels = _kernels(model)
    pasts = {graph.node[k].input[i] for graph, k in kernels for i in _PASTS if i < len(graph.node[k].input)}
    for var in meta.variables:
        if var.length_input and var.state_input not in pasts:
            raise PassError(f"variable '{var.id}': its cache is not read by a fused attention")
    if not kernels:
        return RaggedKv("", "", 0)
    fresh = namer(model.graph)

    seqlens, key_index = fresh(SEQLENS), fresh(KEY_INDEX)
    graph = model.graph
    graph.input.append(helper.make_tensor_value_info(seqlens, onnx.TensorProto.INT32, ["pool_batch"]))
    graph.input.append(
        helper.make_tensor_value_info(key_index, onnx.TensorProto.INT64, ["pool_batch", 1, 1, "pool_total"])
    )
    for owner in graphs(model.graph):
        rewritten: list[onnx.NodeProto] = []
        for node in owner.node:
            if node.op_type == "GroupQueryAttention" and node.domain == "com.microsoft":
                node.input[_SEQLENS_AT] = seqlens
                if len(node.input) > _BIAS_AT and node.input[_BIAS_AT]:
                    rewritten += _gathered_bias(node, key_index, fresh)
            rewritten.append(node)
        if len(rewritten) != len(owner.node):
            del owner.node[:]
            owner.node.extend(rewritten)
    return RaggedKv(seqlens, key_index, len(kernels))


def _gathered_bias(node: onnx.NodeProto, key_index: str, fresh) -> list[onnx.NodeProto]:
    """Nodes making ``node``'s attention_bias each row's own keys (``key_index``), and the input
    renamed to their result."""
    bias = node.input[_BIAS_AT]
    b_shape, i_shape, shape = fresh(f"{bias}_shape"), fresh(f"{key_index}_shape"), fresh(f"{bias}_rows_shape")
    full, index, gathered = fresh(f"{bias}_rows"), fresh(f"{key_index}_rows"), fresh(f"{bias}_per_row")
    node.input[_BIAS_AT] = gathered
    return [
        helper.make_node("Shape", [bias], [b_shape], name=fresh(f"{b_shape}_node")),
        helper.make_node("Shape", [key_index], [i_shape], name=fresh(f"{i_shape}_node")),
        helper.make_node("Max", [b_shape, i_shape], [shape], name=fresh(f"{shape}_node")),
        helper.make_node("Expand", [bias, shape], [full], name=fresh(f"{full}_node")),
        helper.make_node("Expand", [key_index, shape], [index], name=fresh(f"{index}_node")),
        helper.make_node("GatherElements", [full, index], [gathered], name=fresh(f"{gathered}_node"), axis=3),
    ]

"""The past/present layout of ONNX LLM tools, made from the explicit form of a decoder-only LLM.

onnxruntime-genai and optimum's ``ORTModelForCausalLM`` run a decoder as a stateless function of
``past_key_values.N.key|value`` to ``present.N.key|value``: the caller feeds the past, an empty one
(``[batch, kv_heads, 0, head_dim]``) on the first step, and reorders it between beam-search steps.
An optimum-intel IR keeps the same caches in variables instead, each read through
``Gather(cache, beam_idx)`` so that OpenVINO reorders beams inside the model. On the explicit form
(:func:`~ortstate.passes.to_explicit`) this pass, per KV variable:

- renames its state input to ``past_key_values.N.key|value`` and its state output to
  ``present.N.key|value`` (``N`` and key/value read from the variable id, which optimum-intel
  makes of those very names: ``past_key_values.0.keypresent.0.key``), listed after the model's own
  inputs and outputs in layer order, key before value;
- drops its init: the ``If(init flag, init, state)`` becomes the state input itself, and its flag
  input goes. An optimum-intel KV init is zeros of ``[batch, kv_heads, 0, head_dim]``, i.e. the
  empty past the caller now feeds; the pass requires the variable's initial shape to be empty
  along the sequence axis;
- where every cache is appended to by the fused attention (see :mod:`.kv_share`), lets the past be
  a buffer longer than the cache, shared with the present (onnxruntime-genai's
  ``past_present_share_buffer``): the rows of the past are then ``attention_mask``'s length less
  ``input_ids``', as onnxruntime-genai's own models compute them;
- removes the beam reorder: the rows of the cache selected by a graph input's indices (a
  ``Gather(axis=0)``, with the converter's zeros for out-of-range ones, or the runtime's reorder
  the variable's metadata names) become the cache itself, and that input (``beam_idx``) goes;
  nothing else may read it.

Anything else in state (SSM or convolution states of mamba and hybrid models, cross-attention K/V
computed from an encoder's output) is not a KV cache these tools feed, and the pass refuses it.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import onnx
from onnx import helper

from ..errors import PassError
from ..meta import EXPLICIT, META_KEY, ModelMeta, VariableMeta, shown_id
from .beam_reorder import beam_reorder, constant_values
from .build import namer
from .kv_share import share_kv, shares_all
from .prune import prune
from .walk import all_names, consumers, outer_reads, rename_uses, sorted_nodes

__all__ = ["PAST_NAME", "PRESENT_NAME", "KvCache", "kv_layout"]

# The names every ONNX LLM tool uses (printf style, as genai_config.json spells them).
PAST_NAME = "past_key_values.%d.%s"
PRESENT_NAME = "present.%d.%s"
KINDS = ("key", "value")
# optimum-intel's variable ids: the past input's name, then the present output's (a layer number of
# at most 9 digits: int() of a longer run is refused by Python past 4,300 digits, and slow before)
_KV_ID = re.compile(r"past_key_values\.(\d{1,9})\.(key|value)(?:present\.\1\.\2)?$")
_SEQ_AXIS = 2
# The inputs the rows of the past are read from when the cache may be a longer buffer (the past's
# length: attention_mask's less input_ids'): onnxruntime-genai feeds both so.
_SHARE_INPUTS = frozenset({"attention_mask", "input_ids"})


@dataclasses.dataclass(frozen=True)
class KvCache:
    """What the caller of a past/present model must know about its cache.

    Attributes:
        layers: number of layers (each has a key and a value cache).
        kv_heads: heads of the cache (dim 1).
        head_size: dim 3.
        dtype: numpy dtype name of the cache.
        beam_input: the graph input the removed beam reorder read (``beam_idx``), None if none.
        shares_buffer: the past may be a buffer longer than the cache, the same one as the present
            (onnxruntime-genai's ``past_present_share_buffer``): each step writes its rows in place.
    """

    layers: int
    kv_heads: int
    head_size: int
    dtype: str
    beam_input: str | None
    shares_buffer: bool = False


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What the layout changes: each cache's slot, the nodes dropped, the values read instead."""

    slots: dict[str, tuple[int, str]]  # variable id: (layer, "key"|"value")
    shape: tuple[int, int]  # (kv_heads, head_size)
    renames: dict[str, str]  # an init guard's or a beam reorder's value: the state input
    dropped: set[int]  # the init guards and beam reorders
    beam: str | None  # the input the beam reorder read


def kv_layout(model: onnx.ModelProto, meta: ModelMeta) -> KvCache:
    """Rewrite explicit-form ``model`` into the past/present layout, in place.

    The ortstate metadata is removed: the model keeps no state of its own afterwards.

    Raises:
        PassError: ``model`` is not of the explicit form, a variable is not a KV cache laid out as
            optimum-intel writes it (naming the variable and what is wrong), or a new name is taken;
            ``model`` is not changed.
    """
    if meta.form != EXPLICIT:
        raise PassError(f"the past/present layout is made from the explicit form, not the {meta.form} form")
    shared = _SHARE_INPUTS <= {i.name for i in model.graph.input} and shares_all(model, meta)
    if shared:
        meta = share_kv(model, meta)
    plan = _plan(model.graph, meta)
    _apply(model.graph, meta, plan)
    for index in reversed(range(len(model.metadata_props))):
        if model.metadata_props[index].key == META_KEY:
            del model.metadata_props[index]
    carrier = meta.variables[0].carrier or meta.variables[0].dtype
    return KvCache(len(plan.slots) // 2, plan.shape[0], plan.shape[1], carrier, plan.beam, shared)


def _plan(graph: onnx.GraphProto, meta: ModelMeta) -> _Plan:
    """Check every variable is a KV cache the layout can take; what to drop and rename."""
    shape = _cache_shape(meta.variables)
    slots = _slots(meta.variables)
    taken = all_names(graph)
    for var in meta.variables:
        layer, kind = slots[var.id]
        for name in (PAST_NAME % (layer, kind), PRESENT_NAME % (layer, kind)):
            if name in taken:
                raise PassError(f"variable {shown_id(var.id)}: the name '{name}' is already used by the model")
    renames: dict[str, str] = {}
    dropped: set[int] = set()
    beam = _drop_inits_and_reorders(graph, meta, renames, dropped)
    if beam is not None and beam in _needed(graph, renames, dropped):
        raise PassError(f"input '{beam}' is read by more than the KV caches' beam reorder")
    return _Plan(slots, shape, renames, dropped, beam)


def _drop_inits_and_reorders(
    graph: onnx.GraphProto, meta: ModelMeta, renames: dict[str, str], dropped: set[int]
) -> str | None:
    """Plan each cache's init guard and beam reorder away (the state input read instead); returns
    the one input every reorder reads (None if there is none)."""
    used = consumers(graph)
    inputs = {i.name for i in graph.input}
    constants = constant_values(graph)
    beam_inputs: dict[str, str] = {}  # variable id: the input its reorder reads
    for var in meta.variables:
        value = var.state_input
        if var.init_flag is not None:
            guard = next((i for i in used.get(var.init_flag, set()) if graph.node[i].op_type == "If"), None)
            if guard is None or len(used[var.init_flag]) != 1:
                raise PassError(f"variable {shown_id(var.id)}: its init flag does not guard one If alone")
            value = graph.node[guard].output[0]
            renames[value] = var.state_input
            dropped.add(guard)
        reorder = beam_reorder(graph, var.id, {var.state_input, value}, inputs, constants)
        if reorder is not None:
            result, node, beam_input = reorder
            beam_inputs[var.id] = beam_input
            renames[result] = var.state_input
            dropped.add(node)
        elif var.reorder is not None:  # the converter left the reorder to the runtime: to the caller now
            beam_inputs[var.id] = var.reorder
    if len(set(beam_inputs.values())) > 1:
        raise PassError(
            f"the KV caches are reordered by more than one input ({', '.join(sorted(set(beam_inputs.values())))})"
        )
    if beam_inputs and len(beam_inputs) != len(meta.variables):
        odd = next(v.id for v in meta.variables if v.id not in beam_inputs)
        raise PassError(f"variable '{odd}' is not reordered by '{next(iter(beam_inputs.values()))}' as the others")
    return next(iter(beam_inputs.values()), None)


def _apply(graph: onnx.GraphProto, meta: ModelMeta, plan: _Plan) -> None:
    """Drop the planned nodes, name the caches past/present, list them after the model's own
    inputs and outputs in layer order, key before value."""
    kept = [node for index, node in enumerate(graph.node) if index not in plan.dropped]
    del graph.node[:]
    graph.node.extend(kept)
    rename_uses(graph, {k: _final(v, plan.renames) for k, v in plan.renames.items()})
    ecosystem = {}
    for var in meta.variables:
        layer, kind = plan.slots[var.id]
        ecosystem[var.state_input] = PAST_NAME % (layer, kind)
        ecosystem[var.state_output] = PRESENT_NAME % (layer, kind)
    rename_uses(graph, ecosystem)
    flags = {v.init_flag for v in meta.variables}
    ordered = sorted(meta.variables, key=lambda v: (plan.slots[v.id][0], KINDS.index(plan.slots[v.id][1])))
    states, outputs = {v.state_input for v in ordered}, {v.state_output for v in ordered}
    new_inputs = [i for i in graph.input if i.name not in flags and i.name not in states]
    new_inputs += [_cache_value(ecosystem[v.state_input], v, plan.shape, "past_sequence_length") for v in ordered]
    new_outputs = [o for o in graph.output if o.name not in outputs]
    new_outputs += [_cache_value(ecosystem[v.state_output], v, plan.shape, "total_sequence_length") for v in ordered]
    lengths = {v.length_input for v in ordered if v.length_input}
    new_inputs = [i for i in new_inputs if i.name not in lengths]
    new_outputs = [o for o in new_outputs if o.name not in {v.length_output for v in ordered}]
    if lengths:  # rows of the past: the mask's length less this step's tokens (genai's own rule)
        past = _past_length(graph)
        rename_uses(graph, dict.fromkeys(lengths, past))
    del graph.output[:]
    graph.output.extend(new_outputs)
    ordered_nodes = sorted_nodes(graph.node)
    del graph.node[:]
    graph.node.extend(ordered_nodes)
    prune(graph)
    del graph.input[:]
    graph.input.extend(v for v in new_inputs if v.name != plan.beam)


def _past_length(graph: onnx.GraphProto) -> str:
    """Nodes computing ``attention_mask``'s length less ``input_ids``' (int64 scalar); its name."""
    fresh = namer(graph)
    names = {key: fresh(f"ortstate.past_length.{key}") for key in ("total", "seq", "value", "axis")}
    mask, ids = sorted(_SHARE_INPUTS)
    graph.initializer.append(onnx.numpy_helper.from_array(np.array([1], np.int64), names["axis"]))
    graph.node.extend(
        [
            helper.make_node("Shape", [mask], [names["total"] + "_1d"], start=1, end=2),
            helper.make_node("Shape", [ids], [names["seq"] + "_1d"], start=1, end=2),
            helper.make_node("Squeeze", [names["total"] + "_1d"], [names["total"]]),
            helper.make_node("Squeeze", [names["seq"] + "_1d"], [names["seq"]]),
            helper.make_node("Sub", [names["total"], names["seq"]], [names["value"]]),
        ]
    )
    return names["value"]


def _slots(variables: tuple[VariableMeta, ...]) -> dict[str, tuple[int, str]]:
    """``{variable id: (layer, "key"|"value")}``, checked to cover layers 0..N-1 once each."""
    if not variables:
        raise PassError("the model has no state: there is no KV cache to lay out")
    slots: dict[str, tuple[int, str]] = {}
    for var in variables:
        match = _KV_ID.match(var.id)
        if match is None:
            raise PassError(f"variable {shown_id(var.id)} is not a KV cache named past_key_values.N.key|value")
        slots[var.id] = (int(match.group(1)), match.group(2))
    seen = sorted(slots.values())
    layers = len(seen) // 2
    expected = [(layer, kind) for layer in range(layers) for kind in KINDS]
    if seen != expected:
        raise PassError(f"the KV caches are not one key and one value for each of layers 0..{layers - 1}")
    return slots


def _cache_shape(variables: tuple[VariableMeta, ...]) -> tuple[int, int]:
    """(kv_heads, head_size) shared by every cache, each checked to be ``[batch, heads, seq, head]``
    with an empty sequence at first."""
    found: set[tuple[int, int, str]] = set()
    for var in variables:
        shape = var.shape
        if var.state_input is None or var.state_output is None:
            raise PassError(f"variable {shown_id(var.id)} has no state input or output")
        if shape is None or len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int):
            raise PassError(
                f"variable {shown_id(var.id)} of shape {_shape_text(shape)} "
                "is not a [batch, kv_heads, seq, head_size] KV cache"
            )
        if var.init_shape[_SEQ_AXIS] != 0:
            raise PassError(
                f"variable {shown_id(var.id)} of shape {_shape_text(shape)} is not a KV cache: it does not start empty "
                f"along the sequence axis (initial shape {_shape_text(var.init_shape)})"
            )
        found.add((shape[1], shape[3], var.carrier or var.dtype))
    if len(found) != 1:
        raise PassError(f"the KV caches differ in heads, head size or dtype: {sorted(found)}")
    heads, size, _ = found.pop()
    return heads, size


def _shape_text(shape: list[int | list[int | None]] | None) -> str:
    """``[?, 2, ?, 16]``: a dynamic dim as ``?``."""
    if shape is None:
        return "[...]"
    return "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in shape) + "]"


def _cache_value(name: str, var: VariableMeta, shape: tuple[int, int], seq: str) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(var.carrier or var.dtype))
    return helper.make_tensor_value_info(name, elem, ["batch_size", shape[0], seq, shape[1]])


def _needed(graph: onnx.GraphProto, renames: dict[str, str], dropped: set[int]) -> set[str]:
    """The values the graph's outputs would need with ``dropped`` gone and ``renames`` applied."""
    needed = {o.name for o in graph.output}
    for index in reversed(range(len(graph.node))):
        node = graph.node[index]
        if index not in dropped and any(o in needed for o in node.output):
            needed.update(_final(i, renames) for i in (*node.input, *outer_reads(node)))
    return needed


def _final(name: str, renames: dict[str, str]) -> str:
    seen = set()
    while name in renames and name not in seen:
        seen.add(name)
        name = renames[name]
    return name

"""Per-stream init in one batched run: a variable's init flag made one per row.

In the explicit form a variable whose init the model computes reads
``If(flag, <init>, <state input>)``, the flag a bool scalar for the whole run. Here the flag becomes
a bool input with one element per stream (``[batch]``), and the ``If`` becomes
``If(any(flags), Where(flags along the batch axis, <init>, <state input>), <state input>)``: a step
where no stream starts skips the init subgraph as before; one where some do computes it once for
the batch and takes it only in those streams' rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...errors import OrtStateError
from ...meta import ModelMeta, VariableMeta
from ..build import namer
from ..walk import consumers

__all__ = ["BATCH_PARAM", "rows_init"]

BATCH_PARAM = "ortstate.batch"


def rows_init(
    model: onnx.ModelProto, meta: ModelMeta, axes: Mapping[str, int], origin: str, *, declare: bool = False
) -> tuple[ModelMeta, dict[str, str]]:
    """Rewrite ``model`` in place so each flagged variable's flag is per row (see the module), its
    state batched along ``axes[var.id]``; returns the metadata without the scalar flags and
    ``{variable id: its per-row flag input}``. ``declare``: also record each ``If``'s output as of
    its variable's shape, for shape inference.

    Raises:
        OrtStateError: a flag read by another node than the ``If`` choosing the variable's init.
    """
    graph = model.graph
    fresh = namer(graph)
    used = consumers(graph)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    flags: dict[str, str] = {}
    variables: list[VariableMeta] = []
    added: list[onnx.NodeProto] = []
    for var in meta.variables:
        if not var.init_flag:
            variables.append(var)
            continue
        readers = [graph.node[i] for i in used.get(var.init_flag, set())]
        if len(readers) != 1 or readers[0].op_type != "If" or list(readers[0].input) != [var.init_flag]:
            raise OrtStateError(
                f"{origin}: variable '{var.id}': its init flag is read by other nodes than one If, so streams "
                "cannot start one by one in a batch"
            )
        guard = readers[0]
        any_row = fresh(f"{guard.name}/pool_any")
        as_int, most = fresh(f"{guard.name}/pool_flags_int"), fresh(f"{guard.name}/pool_flags_max")
        added += [
            helper.make_node("Cast", [var.init_flag], [as_int], name=as_int, to=TensorProto.INT32),
            helper.make_node("ReduceMax", [as_int], [most], name=most, keepdims=0),
            helper.make_node("Cast", [most], [any_row], name=any_row, to=TensorProto.BOOL),
        ]
        _init_flagged_rows(guard, var, axes[var.id], opset, fresh)
        guard.input[0] = any_row
        for value in graph.input:
            if value.name == var.init_flag:
                value.CopyFrom(helper.make_tensor_value_info(var.init_flag, TensorProto.BOOL, [BATCH_PARAM]))
        if declare:  # a ReadValue gives a value of its variable's shape, whatever shape inference makes of it
            state = next(v for v in graph.input if v.name == var.state_input)
            graph.value_info.append(helper.make_tensor_value_info(guard.output[0], 0, None))
            graph.value_info[-1].type.CopyFrom(state.type)
        flags[var.id] = var.init_flag
        variables.append(dataclasses.replace(var, init_flag=None))
    if added:
        kept = list(graph.node)
        del graph.node[:]
        graph.node.extend(added + kept)
    return dataclasses.replace(meta, variables=tuple(variables)), flags


def _init_flagged_rows(
    guard: onnx.NodeProto, var: VariableMeta, axis: int, opset: int, fresh: Callable[[str], str]
) -> None:
    """Make ``guard``'s then-branch (the variable's init value) give the init value only on the rows
    whose flag is set, and each other row's state as it is: ``Where(flag per row, init, state)``,
    the flag unsqueezed over the state's axes after the batch ``axis``."""
    then = next(a.g for a in guard.attribute if a.name == "then_branch")
    init = then.output[0].name
    rows = fresh(f"{guard.name}/pool_rows")
    picked = fresh(f"{guard.name}/pool_init")
    trailing = len(var.shape or []) - axis - 1
    if not trailing:
        then.node.append(helper.make_node("Identity", [var.init_flag], [rows], name=rows))
    elif opset >= 13:  # noqa: PLR2004 - Unsqueeze's axes became an input in opset 13
        after = fresh(f"{guard.name}/pool_rows_axes")
        axes_value = numpy_helper.from_array(np.arange(1, trailing + 1, dtype=np.int64), after)
        then.node.append(helper.make_node("Constant", [], [after], name=after, value=axes_value))
        then.node.append(helper.make_node("Unsqueeze", [var.init_flag, after], [rows], name=rows))
    else:
        then.node.append(
            helper.make_node("Unsqueeze", [var.init_flag], [rows], name=rows, axes=list(range(1, trailing + 1)))
        )
    then.node.append(helper.make_node("Where", [rows, init, var.state_input or ""], [picked], name=picked))
    then.output[0].name = picked

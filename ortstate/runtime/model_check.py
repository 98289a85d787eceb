"""Check a model against its ortstate metadata before ONNX Runtime, or any state op, sees it.

A ``.onnx`` file is input like any other: a crafted or damaged one must be refused with a clear
error here, because inside ONNX Runtime a state op that fails aborts the process (see
:mod:`.pyops`). What the runtime relies on:

- custom-op form: the request key is an int64 scalar graph input, and every ``ReadValue`` and
  ``Assign`` takes exactly it as its second input (so a model cannot pick the store it reaches),
  names a variable of the metadata in its one ``variable_id`` attribute, and each variable has
  exactly one ``Assign``;
- explicit form: each variable's state input, state output and init flag are graph inputs and
  outputs of the model, none shared;
- both: every name the runtime feeds is a graph input of the right kind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import onnx

from ..errors import OrtStateError
from ..meta import ASSIGN, CONTRIB_DOMAIN, EXPLICIT, FUSED_OP, READ_VALUE, VARIABLE_ID, ModelMeta, shown_id
from ..passes.walk import nodes

__all__ = ["check_model"]


def check_model(model: onnx.ModelProto, meta: ModelMeta, origin: str) -> None:
    """Raise :class:`OrtStateError` (naming ``origin`` and the node or name at fault) if ``model``
    is not laid out as its metadata says."""
    graph = model.graph
    inputs = {i.name: i for i in graph.input}
    for name in {t.name for t in graph.initializer} & inputs.keys():
        del inputs[name]  # an input with an initializer is a constant the feeds may override
    outputs = {o.name for o in graph.output}
    fed: list[str] = []

    def scalar_input(name: str | None, elem_type: int, what: Callable[[], str]) -> None:
        # ``what`` is written out only for an error: a variable's shown_id reads all of its id.
        value = inputs.get(name or "")
        if value is None:
            raise OrtStateError(f"{origin}: {what()} '{name}' is not a graph input of the model")
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or tensor.elem_type != elem_type or len(tensor.shape.dim) != 0:
            want = onnx.TensorProto.DataType.Name(elem_type).lower()
            raise OrtStateError(f"{origin}: {what()} '{name}' must be a {want} scalar input")
        fed.append(name or "")

    for var in meta.variables:
        if var.init_flag is not None:
            scalar_input(
                var.init_flag, onnx.TensorProto.BOOL, lambda var=var: f"variable {shown_id(var.id)}: init flag"
            )
    if meta.form == EXPLICIT:
        for var in meta.variables:
            if var.state_input not in inputs:
                raise OrtStateError(
                    f"{origin}: variable {shown_id(var.id)}: state input '{var.state_input}' is not a graph input"
                )
            if var.state_output not in outputs:
                raise OrtStateError(
                    f"{origin}: variable {shown_id(var.id)}: state output '{var.state_output}' is not a graph output"
                )
            fed.append(var.state_input or "")
        outs = [v.state_output for v in meta.variables]
        if len(set(outs)) != len(outs):
            raise OrtStateError(f"{origin}: two variables share a state output")
    elif meta.variables:
        scalar_input(meta.request_input, onnx.TensorProto.INT64, lambda: "request key")
        _check_state_nodes(graph, meta, origin)
    twice = [name for name, n in Counter(fed).items() if n > 1]
    if twice:
        raise OrtStateError(f"{origin}: graph input '{twice[0]}' is fed for two purposes")


def _check_state_nodes(graph: onnx.GraphProto, meta: ModelMeta, origin: str) -> None:
    known = {v.id for v in meta.variables}
    count: Counter[tuple[str, str]] = Counter()
    for node in nodes(graph):
        if node.domain != CONTRIB_DOMAIN:
            continue
        where = f"{origin}: node '{node.name}' ({node.op_type})"
        if FUSED_OP.fullmatch(node.op_type):
            raise OrtStateError(f"{where}: fused state ops are made by the runtime, not read from a model")
        if node.op_type not in (READ_VALUE, ASSIGN):
            continue
        if len(node.input) != 2 or len(node.output) != 1:
            got = f"{len(node.input)} inputs and {len(node.output)} outputs"
            raise OrtStateError(f"{where}: a state op has 2 inputs (value, request key) and 1 output, not {got}")
        if node.input[1] != meta.request_input:
            raise OrtStateError(
                f"{where}: its key input is '{node.input[1]}', not the request key '{meta.request_input}'"
            )
        attrs = list(node.attribute)
        if len(attrs) != 1 or attrs[0].name != VARIABLE_ID or attrs[0].type != onnx.AttributeProto.STRING:
            raise OrtStateError(f"{where}: a state op has one string attribute, variable_id")
        try:
            var_id = attrs[0].s.decode()
        except UnicodeDecodeError:
            raise OrtStateError(f"{where}: variable_id is not UTF-8") from None
        if var_id not in known:
            raise OrtStateError(f"{where}: variable {shown_id(var_id)} is not in the model's ortstate metadata")
        count[(var_id, node.op_type)] += 1
    for var_id in sorted(known):  # reads may repeat (they give one value); two writes would race
        if count[(var_id, ASSIGN)] != 1:
            raise OrtStateError(
                f"{origin}: variable {shown_id(var_id)} has {count[(var_id, ASSIGN)]} Assign nodes, expected 1"
            )

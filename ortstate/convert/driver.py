"""The conversion driver: walk the IR in topological order and write one ONNX model."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import onnx
from onnx import helper

from ..errors import ConversionError, UnsupportedOpsError
from ..ir import Graph, Layer, parse_partial_shape, read_ir
from ..meta import CONTRIB_DOMAIN, CUSTOM_OP, ModelMeta, name_prefix, write_meta
from ..output_files import check_writable
from ..passes.pipelines import CONVERT, EXPLICIT, PassOptions
from ..passes.walk import rename_reads, sorted_nodes
from ..progress import task
from . import ops  # noqa: F401  (registers the translators)
from .builder import GraphBuilder
from .compressed import MS_DOMAIN
from .context import OPSET, Context, ConvertOptions
from .dtypes import onnx_type
from .external import Array, inline, save_model
from .loop_state import MainScope
from .registry import lookup
from .state import StateWriter
from .translate import Values, input_value, tag, translate_layer
from .variables import Variable, collect_variables
from .weights_report import write_attention_report, write_report

__all__ = ["Built", "build", "convert", "convert_graph", "unsupported_ops"]

_STRUCTURAL = frozenset({"Parameter", "Result", "ReadValue", "Assign"})
# Init-only layers of these types are cheap enough to run every step instead of paying for an If.
_CHEAP_INIT_OPS = frozenset(
    "Const Convert ShapeOf Gather Concat Broadcast Reshape Squeeze Unsqueeze Slice StridedSlice Range".split()
)
ONNX_IR_VERSION = 10  # onnx writes 14 by default; onnxruntime 1.31 reads at most 13


def convert(
    xml: str | os.PathLike[str],
    onnx_path: str | os.PathLike[str] | None = None,
    *,
    explicit_state: bool = False,
    bin_path: str | os.PathLike[str] | None = None,
    int8_activations: bool = False,
) -> onnx.ModelProto:
    """Convert an OpenVINO IR to ONNX; write it to ``onnx_path`` when given.

    Args:
        xml: the IR's ``.xml``; its ``.bin`` is read from beside it unless ``bin_path`` is given.
        onnx_path: where to save the model. Above 64 MB of weights they go to ``PATH.data`` beside
            it (streamed from the ``.bin``), and the model returned refers to that file instead of
            holding them: open the path with ``StatefulSession``, or load them with
            ``onnx.load_external_data_for_model``.
        explicit_state: make every variable a graph input/output pair (no custom ops) instead of
            ReadValue/Assign custom ops: the custom-op form rewritten by
            :func:`ortstate.passes.to_explicit`, as a session's ``form="auto"`` does on load.
        int8_activations: compressed weights compute on int8-quantized activations, as
            OpenVINO's default CPU config does: faster, but logits move ~1e-2 from the exact
            (``INFERENCE_PRECISION_HINT=f32``, no dynamic quantization) results.

    Raises:
        IRError, UnsupportedOpsError, ConversionError, StateError (all ``OrtStateError``).
        OutputFileError: ``onnx_path`` cannot be written (checked before converting, as far as
            it can be: a full disk shows only when writing); the files there are left as they were.
    """
    if onnx_path is not None:
        check_writable(onnx_path)
    graph = read_ir(xml, bin_path)
    built = build(graph, explicit_state=explicit_state, options=ConvertOptions(int8_activations))
    if onnx_path is None:
        inline(built.model.graph, built.arrays)
    else:
        save_model(built.model, built.arrays, onnx_path)
    return built.model


def unsupported_ops(graph: Graph) -> dict[str, list[str]]:
    """``{"Type-N": [layer descriptions]}`` for every layer no translator handles (bodies too)."""
    missing: dict[str, list[str]] = {}
    for layer in graph.all_layers():
        if layer.type not in _STRUCTURAL and lookup(layer.type, layer.op_version) is None:
            missing.setdefault(layer.op_name, []).append(f"'{name_prefix(layer.name)}' id {layer.id}")
    return missing


@dataclass
class Built:
    """A converted model whose large initializers are stubs for ``arrays`` (see ``external``)."""

    model: onnx.ModelProto
    arrays: dict[str, Array]


def convert_graph(graph: Graph, *, explicit_state: bool = False) -> onnx.ModelProto:
    """Convert a graph read by :func:`ortstate.ir.read_ir` (weights held in the model)."""
    built = build(graph, explicit_state=explicit_state)
    inline(built.model.graph, built.arrays)
    return built.model


def build(graph: Graph, *, explicit_state: bool = False, options: ConvertOptions | None = None) -> Built:
    """Convert ``graph``, leaving its large initializers out of the protobuf (nothing is copied).

    The converter writes the custom-op form; ``explicit_state`` rewrites it with
    :func:`ortstate.passes.to_explicit` (the explicit form's only producer).
    """
    missing = unsupported_ops(graph)
    if missing:
        raise UnsupportedOpsError(missing, graph.source)
    variables = collect_variables(graph)
    b = GraphBuilder(graph.name or "ortstate", keep_large=True)
    written = _write(graph, b, variables, options)
    graph_proto = b.graph()
    meta = ModelMeta(
        form=CUSTOM_OP,
        variables=tuple(replace(written.state.meta[v.id], reorder=written.ctx.reorders.get(v.id)) for v in variables),
        request_input=written.state.request_input,
        source=Path(graph.source).name,
        digest=graph.digest,
    )
    model = helper.make_model(
        graph_proto, opset_imports=_opsets(b), producer_name="ortstate", ir_version=ONNX_IR_VERSION
    )
    del graph_proto  # the model holds its own copy

    def worth(_: object, moved: Sequence[onnx.NodeProto]) -> bool:  # the computed inits the converter guards
        return any(node.name in written.costly for node in moved)

    # Both forms and every saved or exported model get these (to_explicit rewrites this graph).
    meta = CONVERT.run(model, meta, PassOptions(graph.source, worth)).meta
    write_meta(model, meta)
    write_report(model, written.ctx.weights, model.graph)
    write_attention_report(model, written.ctx.attention)
    if explicit_state:
        EXPLICIT.run(model, meta)
    kept = {t.name for t in model.graph.initializer}
    return Built(model, {name: value for name, value in b.large.items() if name in kept})


@dataclass
class _Written:
    """The main graph as translated into the builder."""

    ctx: Context
    state: StateWriter
    costly: set[str]  # the nodes (by name) of layers too costly to run every step for an init


def _write(graph: Graph, b: GraphBuilder, variables: list[Variable], options: ConvertOptions | None) -> _Written:
    """Translate every layer of the main graph, in topological order, into ``b``."""
    values: Values = {}
    _add_inputs(graph, b, values)
    _reserve_outputs(graph, b)  # the model's own names win over every name made below
    state = StateWriter(variables, b)
    ctx = Context(graph, b, MainScope(state), options)

    def value_of(layer: Layer, index: int) -> str:
        return input_value(graph, values, layer, index)

    ctx.value_of = value_of
    costly: set[str] = set()
    layers = graph.topological()
    with task("translating layers", total=len(layers)) as bar:
        for layer in layers:
            bar.update()
            if layer.type in ("Parameter", "Result"):
                continue
            first = len(b.nodes)
            if layer.type == "ReadValue":
                init = value_of(layer, 0) if state.variable(layer).init == "computed" else None
                values[(layer.id, layer.outputs[0].id)] = state.read(layer, init)
            elif layer.type == "Assign":
                out = state.assign(layer, value_of(layer, 0))
                for port in layer.outputs:
                    values[(layer.id, port.id)] = out
            else:
                translate_layer(layer, ctx, values, value_of)
                if layer.type not in _CHEAP_INIT_OPS:
                    costly.update(node.name for node in b.nodes[first:])
            tag(b.nodes[first:], layer)
    _add_outputs(graph, b, value_of)
    _read_aliases(b, ctx.aliases)
    return _Written(ctx, state, costly)


def _opsets(b: GraphBuilder) -> list[onnx.OperatorSetIdProto]:
    opsets = [helper.make_opsetid("", OPSET)]
    for domain in (CONTRIB_DOMAIN, MS_DOMAIN):
        if domain in b.domains:
            opsets.append(helper.make_opsetid(domain, 1))
    return opsets


def _read_aliases(b: GraphBuilder, aliases: dict[str, str]) -> None:
    """Make every reader of an aliased value read its replacement (a fused kernel's output), and
    put the nodes back in an order where each comes after what it reads."""
    if not aliases:
        return
    rename_reads(b.nodes, aliases)
    b.nodes[:] = sorted_nodes(b.nodes)


def _add_inputs(graph: Graph, b: GraphBuilder, values: Values) -> None:
    for layer in graph.parameters:
        name = layer.tensor_name()
        if b.names.taken(name):
            raise ConversionError(f"{graph.source}: {layer.describe()}: input name '{name}' is used twice")
        b.names.reserve(name)
        etype = layer.outputs[0].element_type
        shape = parse_partial_shape(layer.attrs.get("shape", "..."))
        dims = (
            None if shape.dims is None else [d.lo if d.is_static else f"{name}_d{i}" for i, d in enumerate(shape.dims)]
        )
        b.add_input(name, onnx_type(etype, f"{graph.source}: {layer.describe()}"), dims)
        values[(layer.id, layer.outputs[0].id)] = name


def _reserve_outputs(graph: Graph, b: GraphBuilder) -> None:
    for layer in graph.results:
        try:
            b.names.reserve(graph.result_name(layer))
        except (IndexError, KeyError):  # a Result without input: _add_outputs reports it
            continue


def _add_outputs(graph: Graph, b: GraphBuilder, value_of: Callable[[Layer, int], str]) -> None:
    """Name outputs as OpenVINO does, renaming the producing value where we can, else via Identity.

    Every output's name was reserved before translation (:func:`_reserve_outputs`), so no value
    made since has it; an input of that name, or an earlier output, makes it take a suffix.
    """
    produced = {out for node in b.nodes for out in node.output}
    inputs = {i.name for i in b.inputs}
    renames: dict[str, str] = {}
    outputs: set[str] = set()
    for layer in graph.results:
        value = value_of(layer, 0)
        name = graph.result_name(layer)
        if value == name and name not in outputs:
            pass
        elif value in produced and value not in renames and name not in outputs and name not in inputs:
            renames[value] = name
        else:
            if name in outputs or name in inputs:
                name = b.names.fresh(name)
            b.op("Identity", [value], names=[name])
        outputs.add(name)
        etype = _output_type(graph, layer)
        # onnx.checker wants a shape on graph outputs; IR ports give the rank, -1 where dynamic.
        dims = [d.lo if d.is_static else f"{name}_d{i}" for i, d in enumerate(layer.inputs[0].shape.dims or ())]
        b.add_output(name, etype, dims)
    b.rename_all(renames)


def _output_type(graph: Graph, layer: Layer) -> int:
    _, port = graph.producer(layer, 0)
    etype = port.element_type or layer.inputs[0].element_type
    return onnx_type(etype, f"{graph.source}: {layer.describe()}")

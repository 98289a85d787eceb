"""``ortstate inspect``: what a model takes, gives and keeps (.xml or .onnx)."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import onnx

from ..convert import build, collect_variables, read_attention_report, read_report, registered, unsupported_ops
from ..errors import OrtStateError, StateError
from ..ir import Graph, read_ir
from ..meta import EXPLICIT, read_meta, split_id
from ..passes.walk import nodes
from .args import existing_file, model_path
from .command import EXIT_OK, Command
from .report import format_dims, natural_key, table

DESCRIPTION = """\
Show a model's inputs and outputs (name, dtype, shape), its variables (id, element type, shape,
how the initial value is made) and its op types. For an IR (.xml) it also lists the ops ortstate
cannot convert yet, without failing, each with the versions of its type ortstate does convert
("none", or e.g. "1-6, 8+"). For an ONNX model converted by ortstate it shows the form (custom-op
or explicit) and, for the explicit form, the graph inputs/outputs carrying each variable
and the init flag input telling the model to compute a variable's initial value: the names needed
to drive the explicit form by hand, without ortstate. Variables are listed by name (numbers in
names read as numbers), as every ortstate command lists them; an id OpenVINO glued from the input
and output it replaced is shown split (past_key_values.0.key -> present.0.key). Both say which compressed weights
(f16/bf16, NNCF int8/int4) the conversion keeps compressed and as what (MatMulNBits,
GatherBlockQuantized, f16 + Cast), and which it expands to f32, with counts and bytes.

examples:
  ortstate inspect model.xml
  ortstate inspect model.onnx"""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="an OpenVINO IR .xml or an ONNX model")
    p.add_argument("--bin", metavar="MODEL.bin", help="the IR's weights file, if not beside MODEL.xml")


def run(args: argparse.Namespace) -> int:
    path = model_path(args.model)
    if path.suffix.lower() == ".xml":
        print(_inspect_ir(read_ir(path, existing_file(args.bin) if args.bin else None)))
    else:
        print(_inspect_onnx(path))
    return EXIT_OK


def _section(title: str, header: list[str], rows: list[list[str]]) -> str:
    return f"\n{title}\n" + (table(header, rows) if rows else "  (none)")


def _inspect_ir(graph: Graph) -> str:
    layers = list(graph.all_layers())
    name = f" '{graph.name}'" if graph.name else ""
    out = [f"{graph.source}: OpenVINO IR v{graph.version}{name}, {len(layers)} layers"]
    inputs = []
    for layer in graph.parameters:
        port = layer.outputs[0]
        etype = port.element_type
        shape = layer.attrs.get("shape", "")
        inputs.append([layer.tensor_name(), _dtype(etype), f"[{shape}]".replace(" ", "")])
    out.append(_section("inputs", ["name", "dtype", "shape"], inputs))
    outputs = []
    for layer in graph.results:
        _, port = graph.producer(layer, 0)
        etype = port.element_type or layer.inputs[0].element_type
        outputs.append([graph.result_name(layer), _dtype(etype), str(port.shape)])
    out.append(_section("outputs", ["name", "dtype", "shape"], outputs))
    try:
        found = sorted(collect_variables(graph), key=lambda v: natural_key(v.id))
        variables = [[_shown(v.id), v.etype.name, str(v.shape), v.init] for v in found]
    except StateError as exc:
        variables = [
            [_shown(layer.attrs.get("variable_id", "?")), "?", "?", "?"] for layer in graph.of_type("ReadValue")
        ]
        out.append(f"\nproblem: {exc}")
    out.append(_section("variables", ["id", "type", "shape", "init"], variables))
    counts = Counter(layer.op_name for layer in layers)
    out.append(_section("ops", ["op", "count"], [[op, str(n)] for op, n in _by_count(counts)]))
    missing = unsupported_ops(graph)
    if not missing:
        try:  # conversion without saving reads no weight: cheap even at real size
            converted = build(graph).model
            out.append(_weights_section(read_report(converted)))
            out.append(_attention_section(read_attention_report(converted)))
        except OrtStateError as exc:
            out.append(f"\nweights: not converted ({exc})")
    if missing:
        known = registered()
        rows = [
            [
                op,
                str(len(at)),
                _versions(known.get(op.rpartition("-")[0] or op)),
                ", ".join(at[:3]) + ", ..." * (len(at) > 3),
            ]
            for op, at in sorted(missing.items())
        ]
        title = "unsupported ops (ortstate cannot convert this model yet)"
        out.append(_section(title, ["op", "layers", "converted", "where"], rows))
    else:
        out.append("\nunsupported ops: none")
    return "\n".join(out)


def _versions(since: list[int] | None) -> str:
    """The versions of an op type ortstate converts, as ``5+`` (one translator) or ``1-6, 7+``."""
    if not since:
        return "none"
    ranges = [f"{a}-{b - 1}" if b - 1 > a else str(a) for a, b in zip(since, since[1:])]
    return ", ".join([*ranges, f"{since[-1]}+"])


def _inspect_onnx(path: Path) -> str:
    try:
        model = onnx.load(str(path), load_external_data=False)  # the graph is enough
    except OSError:
        raise  # cannot be opened: the command line's fault (exit 2)
    except Exception as exc:  # noqa: BLE001 - protobuf raises several types
        raise OrtStateError(f"{path}: not an ONNX model (nor an IR .xml): {' '.join(str(exc).split())}") from None
    try:
        meta = read_meta(model)
    except ValueError as exc:
        raise OrtStateError(f"{path}: {exc}") from None
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    head = f"{path}: ONNX ir_version {model.ir_version} ({opsets})"
    head += f", ortstate {meta.form} form of {meta.source or '?'}" if meta else ", no ortstate metadata (no variables)"
    out = [head]
    hidden_in = meta.hidden_inputs if meta else set()
    hidden_out = meta.hidden_outputs if meta else set()
    initializers = {t.name for t in model.graph.initializer}
    inputs = [_value_row(v) for v in model.graph.input if v.name not in hidden_in | initializers]
    out.append(_section("inputs", ["name", "dtype", "shape"], inputs))
    outputs = [_value_row(v) for v in model.graph.output if v.name not in hidden_out]
    out.append(_section("outputs", ["name", "dtype", "shape"], outputs))
    variables = []
    explicit = meta is not None and meta.form == EXPLICIT
    for v in sorted(meta.variables, key=lambda v: natural_key(v.id)) if meta else ():
        shape = None if v.shape is None else [d if isinstance(d, int) else _range(d) for d in v.shape]
        row = [_shown(v.id), v.element_type, format_dims(shape).replace("'", ""), v.init]
        if explicit:
            row += [f"{v.state_input} -> {v.state_output}", v.init_flag or "-"]
        variables.append(row)
    header = ["id", "type", "shape", "init"] + (["graph input -> output", "init flag input"] if explicit else [])
    out.append(_section("variables", header, variables))
    counts = Counter(_node_ops(model.graph))
    out.append(_section("ops", ["op", "count"], [[op, str(n)] for op, n in _by_count(counts)]))
    if meta:
        out.append(_weights_section(read_report(model)))
        out.append(_attention_section(read_attention_report(model)))
    return "\n".join(out)


def _shown(var_id: str) -> str:
    """A variable id as the table shows it: a pair OpenVINO glued split, ``past -> present``."""
    pair = split_id(var_id)
    return f"{pair[0]} -> {pair[1]}" if pair else var_id


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 1024:,.1f} KiB"


def _weights_section(rows: list[dict] | None) -> str:
    """Compressed weights: kept compressed (as what) or expanded, with counts and ONNX bytes."""
    table_rows = [
        [str(r.get("source")), str(r.get("as")), str(r.get("count")), _size(int(r.get("bytes", 0)))] for r in rows or []
    ]
    return _section("compressed weights (IR -> ONNX)", ["weights", "as", "count", "ONNX bytes"], table_rows)


def _attention_section(rows: list[dict] | None) -> str:
    """Each ScaledDotProductAttention layer: the kernel it runs on, and why."""
    table_rows = [[str(r.get("layer")), str(r.get("as")), str(r.get("why"))] for r in rows or []]
    return _section("attention (IR -> ONNX)", ["layer", "runs as", "why"], table_rows)


def _node_ops(graph: onnx.GraphProto) -> Iterator[str]:
    for node in nodes(graph):
        yield f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def _by_count(counts: Counter) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _range(dim: list) -> str:
    lo, hi = dim
    return "?" if not lo and hi is None else f"{lo or ''}..{'' if hi is None else hi}"


def _dtype(etype: object) -> str:
    dtype = getattr(etype, "dtype", None)
    return str(dtype) if dtype is not None else str(getattr(etype, "name", "?"))


def _value_row(value: onnx.ValueInfoProto) -> list[str]:
    ttype = value.type.tensor_type
    try:
        dtype = str(onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type))
    except (KeyError, ValueError):
        dtype = onnx.TensorProto.DataType.Name(ttype.elem_type).lower()
    dims = None
    if ttype.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in ttype.shape.dim]
    return [value.name, dtype, format_dims(dims)]


SUMMARY = "show a model's inputs, outputs, variables and ops (.xml or .onnx)"
COMMAND = Command("inspect", SUMMARY, DESCRIPTION, configure, run)

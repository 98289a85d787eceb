"""``ortstate convert``: IR -> ONNX file."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..convert import build, save_model
from ..convert.context import ConvertOptions
from ..errors import UsageError
from ..ir import read_ir
from ..meta import read_meta
from ..output_files import check_writable
from .args import existing_file, model_path
from .command import EXIT_OK, Command
from .report import count, natural_key, progress

DESCRIPTION = """\
Convert an OpenVINO IR (model.xml + model.bin) to an ONNX model that ortstate.StatefulSession runs.
By default every ReadValue/Assign pair becomes a pair of custom ops (ai.onnx.contrib domain) and the
variables live in the session; --explicit-state makes each variable a graph input/output pair
instead (plain ONNX, no custom ops; the session feeds the values back). Unsupported ops are
reported together, in one error. Compressed weights (f16/bf16, NNCF int8/int4) stay compressed
(MatMulNBits, GatherBlockQuantized, f16 + Cast; `ortstate inspect OUT.onnx` lists them); above
64 MB of weights they are written to OUT.onnx.data beside the model. Files are replaced only once
written in full; one that cannot be written (a missing folder, no permission, a full disk) is an
error naming it, exit code 2, with the files there left as they were.

examples:
  ortstate convert model.xml                        # -> model.onnx beside model.xml
  ortstate convert model.xml -o out/lstm.onnx
  ortstate convert model.xml --explicit-state       # -> model.explicit.onnx
  ortstate convert model.xml --bin weights/model.bin"""


def default_output(xml: Path, explicit: bool) -> Path:
    return xml.with_suffix(".explicit.onnx" if explicit else ".onnx")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL.xml", help="the IR's .xml (its .bin is read from beside it)")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT.onnx",
        help="the file to write, or an existing folder to write it into (default: beside MODEL.xml)",
    )
    p.add_argument("--explicit-state", action="store_true", help="variables as graph inputs/outputs, no custom ops")
    p.add_argument("--bin", metavar="MODEL.bin", help="the weights file, if not beside MODEL.xml")
    p.add_argument(
        "--int8-activations",
        action="store_true",
        help="compressed (int4/int8) weights compute on int8-quantized activations, as OpenVINO's default "
        "CPU config does: faster, logits move ~1e-2 from the exact results (default: exact, the activations "
        "split exactly onto int8 grids or computed in f32)",
    )


def run(args: argparse.Namespace) -> int:
    xml = model_path(args.model)
    if xml.suffix.lower() != ".xml":
        raise UsageError(f"{xml}: convert takes an OpenVINO IR .xml file")
    bin_path = existing_file(args.bin) if args.bin else None
    out = Path(args.output) if args.output else default_output(xml, args.explicit_state)
    if out.is_dir():
        out = out / default_output(Path(xml.name), args.explicit_state)
    check_writable(out)  # before converting: a big model takes minutes
    start = time.perf_counter()
    progress(f"converting {xml}")
    graph = read_ir(xml, bin_path)
    built = build(graph, explicit_state=args.explicit_state, options=ConvertOptions(args.int8_activations))
    model = built.model
    save_model(model, built.arrays, out)
    seconds = time.perf_counter() - start
    meta = read_meta(model)
    variables = sorted((v.id for v in meta.variables), key=natural_key) if meta else []
    shown = ", ".join(variables[:4]) + (", ..." if len(variables) > 4 else "")
    var_text = count(len(variables), "variable") + (f" ({shown})" if variables else "")
    form = meta.form if meta else "?"
    layers = sum(1 for layer in graph.layers.values() if layer.type not in ("Parameter", "Result"))
    print(
        f"{xml} -> {out}: {layers} IR ops -> {len(model.graph.node)} ONNX nodes, {var_text}, "
        f"{form} form, {seconds:.2f} s"
    )
    return EXIT_OK


COMMAND = Command("convert", "convert an OpenVINO IR (.xml + .bin) to ONNX", DESCRIPTION, configure, run)

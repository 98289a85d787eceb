"""``ortstate verify``: ortstate and OpenVINO side by side, step by step, through a reset."""

from __future__ import annotations

import argparse

from ..model_meta import CUSTOM_OP, EXPLICIT
from ..verify import DEFAULT_ATOL, DEFAULT_RTOL, FormResult, VerifyResult, verify
from .args import UsageError, existing_file, parse_inputs, parse_shapes
from .command import EXIT_FAILURE, EXIT_OK, Command
from .report import format_dims, format_error, progress, table

DESCRIPTION = f"""\
Run an IR in OpenVINO (CPU, f32 inference precision) and, converted, in ortstate, side by side: N
steps, a reset, N more steps, each step with fresh random inputs from the same seed. After every
step it compares each output and each variable and prints the max abs error per step. Exit code 0
when everything matches within tolerance (|ortstate - OpenVINO| <= atol + rtol * |OpenVINO|;
integers and bools exactly), 1 on a mismatch. Needs OpenVINO: pip install 'ortstate[verify]'.

Random inputs follow the IR's Parameters: floats ~ N(0, 1); integers in [0, batch) so they index
the batch axis validly (beam_idx); bools 50/50. Dynamic dims are --batch for the first dim and 4
for the others; --shape sets an input's whole shape, --input fixes its value for every step.
OpenVINO's side of the reset is a freshly compiled model (its CPU plugin's reset_state() is not
reliable for some caches); ortstate's is reset_state().

examples:
  ortstate verify model.xml
  ortstate verify model.xml --both --steps 5         # custom-op and explicit forms
  ortstate verify model.xml --shape input_ids=1,7 --input beam_idx=beam.npy
  ortstate verify model.xml --onnx model.onnx        # check an ONNX converted earlier
  ortstate verify model.xml --rtol 1e-3 --atol 1e-3  # defaults: rtol {DEFAULT_RTOL:g}, atol {DEFAULT_ATOL:g}"""

_MAX_COLUMNS = 8  # beyond this many outputs + variables, the variables share one column


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL.xml", help="the IR (OpenVINO runs it as is)")
    p.add_argument("--steps", "-n", type=int, default=3, metavar="N", help="steps before and after the reset (3)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random input seed (default 0)")
    forms = p.add_mutually_exclusive_group()
    forms.add_argument("--explicit-state", action="store_true", help="check the explicit form instead of custom-op")
    forms.add_argument("--both", action="store_true", help="check both forms")
    forms.add_argument(
        "--onnx",
        metavar="FILE.onnx",
        help="check this converted model instead of converting (a custom-op one as written, and rewritten "
        "into the explicit form as StatefulSession runs it by default)",
    )
    p.add_argument("--rtol", type=float, default=DEFAULT_RTOL, metavar="R", help=f"(default {DEFAULT_RTOL:g})")
    p.add_argument("--atol", type=float, default=DEFAULT_ATOL, metavar="A", help=f"(default {DEFAULT_ATOL:g})")
    p.add_argument("--batch", type=int, default=2, metavar="B", help="size of dynamic first dims (default 2)")
    p.add_argument("--shape", action="append", metavar="NAME=D0,D1", help="an input's shape (repeatable)")
    p.add_argument("--input", "-i", action="append", metavar="NAME=FILE.npy", help="an input's value (repeatable)")
    p.add_argument("--bin", metavar="MODEL.bin", help="the IR's weights file, if not beside MODEL.xml")


def run(args: argparse.Namespace) -> int:
    xml = existing_file(args.model)
    if xml.suffix.lower() != ".xml":
        raise UsageError(f"{xml}: verify takes an OpenVINO IR .xml (give a converted model with --onnx)")
    if args.steps < 1 or args.batch < 1:
        raise UsageError("--steps and --batch must be at least 1")
    if args.rtol < 0 or args.atol < 0:
        raise UsageError("--rtol and --atol must not be negative")
    fixed = parse_inputs(args.input)
    forms = [CUSTOM_OP, EXPLICIT] if args.both else [EXPLICIT if args.explicit_state else CUSTOM_OP]
    onnx_model = None
    if args.onnx:
        import onnx

        path = existing_file(args.onnx)
        try:
            onnx_model = onnx.load(str(path))
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types
            raise UsageError(f"{path}: not a readable ONNX model: {exc}") from None
    result = verify(
        xml,
        steps=args.steps,
        seed=args.seed,
        forms=forms,
        rtol=args.rtol,
        atol=args.atol,
        batch=args.batch,
        shapes=parse_shapes(args.shape),
        inputs=fixed,
        onnx_model=onnx_model,
        bin_path=existing_file(args.bin) if args.bin else None,
        progress=progress,
    )
    print(_report(result, fixed=set(fixed), seed=args.seed))
    return EXIT_OK if result.ok else EXIT_FAILURE


def _report(result: VerifyResult, fixed: set[str], seed: int) -> str:
    version = result.openvino_version.split("-")[0]
    feeds = ", ".join(f"{name} {dtype}{format_dims(shape)}" for name, (dtype, shape) in result.inputs.items())
    note = f"random, seed {seed}, new values every step" + (f"; fixed: {', '.join(sorted(fixed))}" if fixed else "")
    lines = [
        f"{result.source}: ortstate vs OpenVINO {version} (CPU, f32)",
        f"inputs: {feeds} ({note})",
        f"{result.steps} steps, reset, {result.steps} steps; tolerance rtol {result.rtol:g}, atol {result.atol:g}",
    ]
    for form in result.forms:
        lines += ["", f"{form.form} form: max abs error per step", _form_table(form), _form_verdict(form)]
    lines.append("")
    if result.ok:
        lines.append("OK: ortstate matches OpenVINO")
    else:
        lines.append("MISMATCH: ortstate differs from OpenVINO (see above)")
    return "\n".join(lines)


def _form_table(form: FormResult) -> str:
    outputs = list(dict.fromkeys(c.name for c in form.checks if c.kind == "output"))
    states = list(dict.fromkeys(c.name for c in form.checks if c.kind == "state"))
    merge = len(outputs) + len(states) > _MAX_COLUMNS
    columns = outputs + ([f"{len(states)} states"] if merge and states else [f"state {s}" for s in states])
    cells: dict[tuple[int, int], dict[str, tuple[float, bool]]] = {}
    for c in form.checks:
        column = c.name if c.kind == "output" else (f"{len(states)} states" if merge else f"state {c.name}")
        row = cells.setdefault((c.phase, c.step), {})
        error, ok = row.get(column, (0.0, True))
        row[column] = (max(error, c.error), ok and c.ok)
    rows = []
    for (phase, step), row in sorted(cells.items()):
        if phase == 1 and step == 1:
            rows.append(["reset"])
        values = [row.get(col, (0.0, True)) for col in columns]
        rows.append([str(step)] + [format_error(e) + ("" if ok else " !") for e, ok in values])
    return table(["step", *columns], rows)


def _form_verdict(form: FormResult) -> str:
    if form.ok:
        errors = f"outputs {format_error(form.max_error('output'))}, states {format_error(form.max_error('state'))}"
        return f"{form.form} form: match (max abs error: {errors})"
    bad = [c for c in form.checks if not c.ok]
    lines = [f"{form.form} form: MISMATCH in {len(bad)} of {len(form.checks)} checks, first:"]
    for c in bad[:5]:
        when = f"step {c.step} {'after' if c.phase else 'before'} the reset"
        detail = c.note or f"max abs error {format_error(c.error)}"
        lines.append(f"  {c.kind} '{c.name}', {when}: {detail}")
    return "\n".join(lines)


COMMAND = Command("verify", "compare ortstate with OpenVINO step by step, through a reset", DESCRIPTION, configure, run)

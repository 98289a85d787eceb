"""``ortstate verify``: ortstate and OpenVINO side by side, step by step, through a reset."""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Sequence

import onnx

from ..errors import OrtStateError, UsageError
from ..meta import CUSTOM_OP, EXPLICIT
from ..verify import DEFAULT_ATOL, DEFAULT_RTOL, Check, FormResult, VerifyResult, verify
from .args import add_verbose_option, existing_file, model_path, parse_inputs, parse_shapes
from .command import EXIT_FAILURE, EXIT_OK, Command
from .report import count, format_error, natural_key, progress, table

DESCRIPTION = f"""\
Run an IR in OpenVINO (CPU, f32 inference precision) and, converted, in ortstate, side by side: N
steps, a reset, N more steps. After every step it compares each output and each variable and
prints the max abs error per step. Exit code 0 when everything matches within tolerance
(|ortstate - OpenVINO| <= atol + rtol * |OpenVINO|; integers and bools exactly), 1 on a mismatch.
Needs OpenVINO: pip install 'ortstate[verify]' ('.[verify]' in a checkout).

It checks the form ortstate runs an IR in by default (run, generate, StatefulSession: the explicit
form); --form custom-op checks the custom-op form through its Python state ops, --both both.

The inputs follow the model's roles. A stateful decoder (an optimum-intel LLM: input_ids or
inputs_embeds, with attention_mask, position_ids, cache_position, beam_idx...) is fed as generate
feeds it: a random 4-token prompt (--shape input_ids=B,N sets batch and length), then one random
token per step, with the mask and positions its feeding rules make. Any other model gets random
values every step: floats ~ N(0, 1); integers in [0, batch) so they index the batch axis validly
(beam_idx); bools 50/50; dynamic dims --batch for the first dim and 4 for the others. --shape sets
an input's whole shape, --input fixes its value for every step. OpenVINO's side of the reset is a
freshly compiled model (its CPU plugin's reset_state() is not reliable for some caches).

The table shows one column per output and, for the variables, one per kind (variables whose names
differ only in numbers, e.g. one per layer: the largest error among them); --verbose shows one
column per variable.

examples:
  ortstate verify model.xml
  ortstate verify model.xml --both --steps 5         # custom-op and explicit forms
  ortstate verify openvino_model.xml --shape input_ids=1,7 --verbose
  ortstate verify model.xml --shape x=1,3 --input beam_idx=beam.npy
  ortstate verify model.xml --onnx model.onnx        # check an ONNX converted earlier
  ortstate verify model.xml --rtol 1e-3 --atol 1e-3  # defaults: rtol {DEFAULT_RTOL:g}, atol {DEFAULT_ATOL:g}"""

WIDTH = 100  # the report fits this many columns unless --verbose
FORM_CHOICES = ("auto", CUSTOM_OP, EXPLICIT, "both")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL.xml", help="the IR (OpenVINO runs it as is)")
    p.add_argument(
        "--steps", "-n", type=int, default=3, metavar="N", help="steps before and after the reset (default 3)"
    )
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random input seed (default 0)")
    forms = p.add_mutually_exclusive_group()
    forms.add_argument(
        "--form",
        choices=FORM_CHOICES,
        default="auto",
        help="the form to check: auto (default) = the form run, generate and StatefulSession run an IR in "
        "(explicit); custom-op; explicit; both",
    )
    forms.add_argument("--both", action="store_true", help="check both forms (--form both)")
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
    add_verbose_option(p, "; and one table column per variable")


def forms_of(args: argparse.Namespace) -> list[str]:
    """The forms ``--form``/``--both`` ask for (auto: the one an IR runs in by default)."""
    form = "both" if args.both else args.form
    return [CUSTOM_OP, EXPLICIT] if form == "both" else [CUSTOM_OP if form == CUSTOM_OP else EXPLICIT]


def run(args: argparse.Namespace) -> int:
    xml = model_path(args.model)
    if xml.suffix.lower() != ".xml":
        raise UsageError(f"{xml}: verify takes an OpenVINO IR .xml (give a converted model with --onnx)")
    if args.steps < 1 or args.batch < 1:
        raise UsageError("--steps and --batch must be at least 1")
    if args.rtol < 0 or args.atol < 0:
        raise UsageError("--rtol and --atol must not be negative")
    fixed = parse_inputs(args.input)
    onnx_model = None
    if args.onnx:
        path = existing_file(args.onnx)
        try:
            onnx_model = onnx.load(str(path))
        except OSError:
            raise  # cannot be opened: the command line's fault (exit 2)
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types
            raise OrtStateError(f"{path}: not an ONNX model: {' '.join(str(exc).split())}") from None
    result = verify(
        xml,
        steps=args.steps,
        seed=args.seed,
        forms=forms_of(args),
        rtol=args.rtol,
        atol=args.atol,
        batch=args.batch,
        shapes=parse_shapes(args.shape),
        inputs=fixed,
        onnx_model=onnx_model,
        bin_path=existing_file(args.bin) if args.bin else None,
        progress=progress,
        note=lambda text: print(f"ortstate: note: {xml}: {text}", file=sys.stderr),
    )
    print(report(result, fixed=set(fixed), seed=args.seed, verbose=args.verbose))
    return EXIT_OK if result.ok else EXIT_FAILURE


def report(result: VerifyResult, fixed: set[str], seed: int, verbose: bool = False) -> str:
    """The whole report: what ran, a table per form, the verdict."""
    version = result.openvino_version.split("-")[0]
    feeds = ", ".join(f"{name} {dtype}[{','.join(map(str, shape))}]" for name, (dtype, shape) in result.inputs.items())
    how = f"seed {seed}, {result.feeding}" + (f"; fixed: {', '.join(sorted(fixed))}" if fixed else "")
    wrap = textwrap.TextWrapper(width=WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    title = f"{result.source}: ortstate vs OpenVINO {version} (CPU, f32)"
    if len(title) > WIDTH:  # a long path gets a line of its own; a path is never broken
        title = f"{result.source}:\n  ortstate vs OpenVINO {version} (CPU, f32)"
    lines = [
        *title.split("\n"),
        *wrap.wrap(f"inputs: {feeds}"),
        *wrap.wrap(f"  {how}"),
        f"{count(result.steps, 'step')}, reset, {count(result.steps, 'step')}; "
        f"tolerance rtol {result.rtol:g}, atol {result.atol:g}",
    ]
    for form in result.forms:
        lines += ["", f"{form.form} form: max abs error per step", *form_table(form, verbose), form_verdict(form)]
    lines.append("")
    if result.ok:
        lines.append("OK: ortstate matches OpenVINO")
    else:
        lines.append("MISMATCH: ortstate differs from OpenVINO (see above)")
    return "\n".join(lines)


def state_kinds(names: Sequence[str]) -> dict[str, list[str]]:
    """Variables grouped by kind, labelled for a column: the names with their numbers taken out
    (one variable per layer makes one kind), each labelled by the last word that tells the kinds
    apart (``key``, ``value``; ``conv``, ``ssm``), else by number."""
    groups: dict[str, list[str]] = {}
    for name in sorted(names, key=natural_key):
        groups.setdefault(re.sub(r"\d+", "#", name), []).append(name)
    if len(groups) == 1:
        (members,) = groups.values()
        return {count(len(members), "state"): members}
    words = {pattern: re.findall(r"[A-Za-z]+", pattern) for pattern in groups}
    labels = {}
    for pattern, tokens in words.items():
        others = [w for p, w in words.items() if p != pattern]
        telling = [t for i, t in enumerate(tokens) if all(i >= len(o) or o[i] != t for o in others)]
        labels[pattern] = telling[-1] if telling else ""
    if len(set(labels.values())) != len(labels) or not all(labels.values()):
        labels = {pattern: f"kind {i}" for i, pattern in enumerate(groups, 1)}
    return {f"{labels[p]} ×{len(m)}" if len(m) > 1 else labels[p]: m for p, m in groups.items()}


def form_table(form: FormResult, verbose: bool = False) -> list[str]:
    """The max abs error per step, outputs and variables as columns: one per variable if that fits
    :data:`WIDTH` (or ``verbose``), else variables per kind, else outputs and variables one column each."""
    outputs = list(dict.fromkeys(c.name for c in form.checks if c.kind == "output"))
    states = sorted(dict.fromkeys(c.name for c in form.checks if c.kind == "state"), key=natural_key)
    each_output = {o: [o] for o in outputs}
    all_outputs = {count(len(outputs), "output"): outputs} if outputs else {}
    kinds = state_kinds(states) if states else {}
    layouts = [
        (each_output, {f"state {s}": [s] for s in states}),
        (each_output, kinds),
        (all_outputs, kinds),
        (all_outputs, {count(len(states), "state"): states} if states else {}),
    ]
    for by_output, by_state in layouts[:1] if verbose else layouts:
        lines = _table(form, by_output, by_state)
        if verbose or max(map(len, lines)) <= WIDTH:
            break
    if any(len(names) > 1 for names in by_state.values()):
        lines.append("  (a column of several variables shows the largest error among them; --verbose: each)")
    return lines


def _table(form: FormResult, outputs: dict[str, list[str]], states: dict[str, list[str]]) -> list[str]:
    column = {("output", n): label for label, names in outputs.items() for n in names}
    column |= {("state", n): label for label, names in states.items() for n in names}
    columns = [*outputs, *states]
    cells: dict[tuple[int, int], dict[str, tuple[float, bool]]] = {}
    for c in form.checks:
        label = column[(c.kind, c.name)]
        row = cells.setdefault((c.phase, c.step), {})
        error, ok = row.get(label, (0.0, True))
        row[label] = (max(error, c.error), ok and c.ok)
    rows = []
    for (phase, step), row in sorted(cells.items()):
        if phase == 1 and step == 1:
            rows.append(["reset"])
        values = [row.get(col, (0.0, True)) for col in columns]
        rows.append([str(step)] + [format_error(e) + ("" if ok else " !") for e, ok in values])
    return table(["step", *columns], rows).splitlines()


def form_verdict(form: FormResult) -> str:
    if form.ok:
        errors = f"outputs {format_error(form.max_error('output'))}, states {format_error(form.max_error('state'))}"
        return f"{form.form} form: match (max abs error: {errors})"
    bad: list[Check] = [c for c in form.checks if not c.ok]
    lines = [f"{form.form} form: MISMATCH in {len(bad)} of {len(form.checks)} checks, first:"]
    for c in bad[:5]:
        when = f"step {c.step} {'after' if c.phase else 'before'} the reset"
        detail = c.note or f"max abs error {format_error(c.error)}"
        lines.append(f"  {c.kind} '{c.name}', {when}: {detail}")
    return "\n".join(lines)


COMMAND = Command("verify", "compare ortstate with OpenVINO step by step, through a reset", DESCRIPTION, configure, run)

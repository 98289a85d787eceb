"""``ortstate run``: run a model for N steps, its variables carried from step to step."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..convert import convert
from ..errors import StateError, UsageError
from ..output_files import check_folder, make_folder, write_file
from ..runtime import StatefulSession, numpy_dtype
from .args import add_form_option, add_verbose_option, existing_file, model_path, parse_inputs
from .command import EXIT_OK, Command
from .report import array_summary, count, natural_key, progress, table

DESCRIPTION = """\
Run a model step by step in ONNX Runtime, keeping its variables between steps as OpenVINO would.
MODEL is an ONNX model converted by ortstate, or an IR .xml (converted in memory first). Every step
gets the same inputs; with --per-step, an input whose .npy has a leading axis of length --steps is
sliced along it, one slice per step. Prints each step's outputs (dtype, shape, min, max, mean) and
the variables after the last step; --output-dir saves every output as stepN_OUTPUT.npy.

examples:
  ortstate run model.onnx --input x=x.npy
  ortstate run model.xml --input x=x.npy --steps 5 --output-dir out/
  ortstate run model.xml --input input=prompt.npy --input beam_idx=beam.npy --steps 4
  ortstate run model.onnx --input x=frames.npy --steps 10 --per-step   # frames.npy: [10, ...]
  ortstate run model.xml --input x=x.npy --state h=h0.npy --state c=c0.npy   # states to start from"""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="an ONNX model converted by ortstate, or an IR .xml")
    p.add_argument("--input", "-i", action="append", metavar="NAME=FILE.npy", help="an input's value (one per input)")
    p.add_argument(
        "--state",
        action="append",
        metavar="NAME=FILE.npy",
        help="a variable's value before the first step (a state the IR gives no initial value for a dynamic "
        "batch, say); the variables are listed by 'ortstate inspect MODEL'",
    )
    p.add_argument("--steps", "-n", type=int, default=1, metavar="N", help="how many runs (default 1)")
    p.add_argument("--per-step", action="store_true", help="slice inputs with a leading axis of length N, one per step")
    p.add_argument("--output-dir", "-o", metavar="DIR", help="save every step's outputs there as .npy files")
    p.add_argument("--bin", metavar="MODEL.bin", help="the IR's weights file, if not beside MODEL.xml")
    add_form_option(p)
    add_verbose_option(p)


def _check_feeds(session: StatefulSession, feeds: dict[str, np.ndarray]) -> None:
    """Say which input is wrong before onnxruntime does, in the command line's terms."""
    inputs = {i.name: i for i in session.get_inputs()}
    missing, unknown = sorted(set(inputs) - set(feeds)), sorted(set(feeds) - set(inputs))
    if missing or unknown:
        problems = [f"missing --input for {', '.join(missing)}"] if missing else []
        problems += [f"unknown input {', '.join(unknown)}"] if unknown else []
        expected = ", ".join(f"{i.name} {i.type} {_dims(i.shape)}" for i in inputs.values()) or "none"
        raise UsageError(f"{'; '.join(problems)} (the model takes: {expected})")
    for name, value in feeds.items():
        arg = inputs[name]
        want = numpy_dtype(arg.type)
        if want is not None and value.dtype != want:
            raise UsageError(f"input '{name}': the file holds {value.dtype} values, the model takes {want}")
        dims = arg.shape
        fits = dims is None or (
            len(dims) == value.ndim and all(not isinstance(d, int) or d == n for d, n in zip(dims, value.shape))
        )
        if not fits:
            raise UsageError(f"input '{name}': shape {list(value.shape)} does not fit the model's {_dims(dims)}")


def _set_states(session: StatefulSession, states: dict[str, np.ndarray]) -> None:
    """The ``--state`` values, each checked as ``VariableState.state`` checks it (named if wrong)."""
    known = {s.name: s for s in session.query_state()}
    for name, value in states.items():
        if name not in known:
            raise UsageError(f"--state {name}: no such variable (the model's: {', '.join(sorted(known)) or 'none'})")
        try:
            known[name].state = value
        except StateError as exc:
            raise UsageError(f"--state {name}: {exc}") from None


def _dims(dims: Any) -> str:
    return "[...]" if dims is None else "[" + ",".join(str(d) if isinstance(d, int) else "?" for d in dims) + "]"


def _file_name(step: int, output: str) -> str:
    return f"step{step}_{re.sub(r'[^A-Za-z0-9._-]+', '_', output)}.npy"


def _session(args: argparse.Namespace, path: Path) -> StatefulSession:
    if path.suffix.lower() != ".xml":
        if args.bin:
            raise UsageError("--bin applies to an IR .xml only")
        return StatefulSession(path, form=args.form)
    bin_path = existing_file(args.bin) if args.bin else None
    progress(f"converting {path}")
    model = convert(path, explicit_state=args.form != "custom-op", bin_path=bin_path)
    return StatefulSession(model, form=args.form)


def run(args: argparse.Namespace) -> int:
    path = model_path(args.model)
    if args.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {args.steps}")
    feeds = parse_inputs(args.input)
    sliced = {n for n, v in feeds.items() if args.per_step and v.ndim > 0 and v.shape[0] == args.steps}
    if args.per_step and not sliced:
        raise UsageError(f"--per-step: no input has a leading axis of length {args.steps} (--steps)")
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir is not None:
        check_folder(out_dir)
    states = parse_inputs(args.state, "--state")
    session = _session(args, path)
    _check_feeds(session, {n: v[0] if n in sliced else v for n, v in feeds.items()})
    _set_states(session, states)
    if out_dir is not None:
        make_folder(out_dir)

    names = [o.name for o in session.get_outputs()]
    rows, saved, total = [], 0, 0.0
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        outputs = session.run(None, {n: v[step - 1] if n in sliced else v for n, v in feeds.items()})
        elapsed = time.perf_counter() - start
        total += elapsed
        for index, (name, value) in enumerate(zip(names, outputs)):
            first = index == 0
            rows.append([str(step) * first, name, *array_summary(value), f"{elapsed * 1e3:.2f}" * first])
            if out_dir is not None:
                write_file(out_dir / _file_name(step, name), lambda f, value=value: np.save(f, value))
                saved += 1
    print(table(["step", "output", "dtype", "shape", "min", "max", "mean", "ms"], rows, indent=""))
    states = [
        [s.name, *array_summary(s.state)] for s in sorted(session.query_state(), key=lambda s: natural_key(s.name))
    ]
    if states:
        print(f"\nvariables after step {args.steps}")
        print(table(["id", "dtype", "shape", "min", "max", "mean"], states, indent=""))
    form = f"{session.form} form"
    if session.model_form != session.form:
        form += f" (a {session.model_form} model, rewritten)"
    print(f"\n{count(args.steps, 'step')}, {form}, {total * 1e3 / args.steps:.2f} ms/step")
    if out_dir is not None:
        print(f"saved {count(saved, 'output file')} to {out_dir}")
    return EXIT_OK


COMMAND = Command("run", "run a model for N steps, keeping its variables between steps", DESCRIPTION, configure, run)

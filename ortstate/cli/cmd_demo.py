"""``ortstate demo``: stream text from a tiny stateful character LSTM, converted from OpenVINO IR.

The demo converts the packaged IR (:mod:`ortstate.cli.char_lstm`) with :func:`ortstate.convert`,
feeds the prompt one character per run (only the variables carry the context), streams greedy
characters to stdout, resets the state and shows that a new stream starts fresh, and prints per-step
latencies. With OpenVINO installed it runs OpenVINO's own stateful ``InferRequest`` on the same IR
and reports whether both produced the same characters.

Generated text goes to stdout; everything else to stderr. Exit code 0, or 1 if OpenVINO disagrees
or a reset did not start afresh, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ..errors import OrtStateError
from .args import add_form_option
from .char_lstm import DEMO_DIR, TEMPERATURE, Stream, Vocab, openvino_step, ortstate_step, stream
from .command import Command

SECOND_PROMPT = "Errors should"  # the "different prompt" after a reset

DESCRIPTION = """\
Convert a tiny stateful character LSTM (an OpenVINO IR shipped with ortstate, made stateful with
MakeStateful as OpenVINO users do) and stream generated text one character per step through
StatefulSession: the LSTM state lives in the variables, not in the inputs. Then reset_state() and
show that a new stream starts fresh, and print the per-step latency. With openvino installed the
same IR runs in OpenVINO side by side and the demo reports whether both produced the same text.

examples:
  ortstate demo
  ortstate demo --prompt "Errors should" --chars 200
  ortstate demo --form custom-op --no-openvino   # through the Python state ops
  ortstate demo --seed 3          # sample instead of greedy decoding"""


def _percentiles(values: list[float]) -> str:
    return f"median {np.median(values):.0f} µs, p90 {np.percentile(values, 90):.0f} µs"


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _echo(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the demo's options to ``ortstate demo``'s parser."""
    parser.add_argument(
        "--prompt", default="Beautiful is", help="text fed one character per step (default %(default)r)"
    )
    parser.add_argument("--chars", type=int, default=120, help="characters to generate per stream (default 120)")
    add_form_option(
        parser,
        "how ortstate keeps the variables: auto (default) = explicit, the faster; custom-op = the Python state ops",
    )
    parser.add_argument("--no-openvino", action="store_true", help="skip the side-by-side OpenVINO run")
    parser.add_argument("--seed", type=int, default=None, help=f"sample at temperature {TEMPERATURE} (default greedy)")


def run(args: argparse.Namespace) -> int:
    """The demo with parsed options. Returns the exit code."""
    if args.chars < 1:
        _err(f"ortstate: error: --chars must be at least 1, got {args.chars}")
        return 2
    xml = DEMO_DIR / "char_lstm.xml"
    vocab = Vocab.load(DEMO_DIR / "vocab.json")
    second = SECOND_PROMPT if args.prompt != SECOND_PROMPT else "Beautiful is"
    try:
        vocab.index(args.prompt)
    except ValueError as exc:
        _err(f"ortstate: error: --prompt: {exc}")
        return 2

    try:
        step, reset, form, seconds = ortstate_step(xml, vocab, args.form)
    except OrtStateError as exc:
        _err(f"ortstate: error: {' '.join(str(exc).split())}")
        return 1
    _err(f"converted {xml.name} ({form} form) and loaded it in {seconds * 1e3:.0f} ms")
    step(vocab.index(" ")[0])  # warm-up run, then start from a clean state
    reset()
    mode = "greedy" if args.seed is None else f"sampling, seed {args.seed}"
    _err(f"[1] prompt {args.prompt!r}, {args.chars} characters ({mode}), one run per character:")
    _echo(args.prompt)
    first = stream(step, vocab, args.prompt, args.chars, args.seed, _echo)
    _echo("\n")

    reset()
    again = stream(step, vocab, args.prompt, args.chars, args.seed)
    fresh = again.text == first.text
    _err(f"[2] reset_state(), same prompt again: {'same text' if fresh else 'DIFFERENT text (state leaked)'}")
    reset()
    _err(f"[3] reset_state(), prompt {second!r}:")
    _echo(second)
    other = stream(step, vocab, second, args.chars, args.seed, _echo)
    _echo("\n")
    _err(f"    {'different text, as it should be' if other.text != first.text else 'the same text as [1]'}")
    timings = first.step_us + again.step_us + other.step_us
    _err(f"ortstate ({form}): {len(timings)} steps, {_percentiles(timings)} per step")

    ok = fresh
    if not args.no_openvino:
        ok = _compare_openvino(xml, vocab, args, second, [first, other]) and ok
    return 0 if ok else 1


def _compare_openvino(xml: Path, vocab: Vocab, args: argparse.Namespace, second: str, ours: list[Stream]) -> bool:
    """OpenVINO's stateful InferRequest on the same IR, each stream after a reset_state()."""
    try:
        ov_step, ov_reset = openvino_step(xml, vocab)
    except ImportError:
        _err("openvino is not installed: skipping the side-by-side run (pip install openvino)")
        return True
    ov_step(vocab.index(" ")[0])
    theirs = []
    for prompt in (args.prompt, second):
        ov_reset()
        theirs.append(stream(ov_step, vocab, prompt, args.chars, args.seed))
    same = all(a.text == b.text for a, b in zip(ours, theirs))
    diff = max(float(np.max(np.abs(a - b))) for mine, ref in zip(ours, theirs) for a, b in zip(mine.logits, ref.logits))
    count = sum(len(s.text) for s in theirs)
    verdict = "the same" if same else "DIFFERENT"
    _err(f"OpenVINO (stateful InferRequest, CPU f32): {verdict} {count} characters, max |logit difference| {diff:.2e}")
    _err(f"OpenVINO: {_percentiles([t for s in theirs for t in s.step_us])} per step")
    return same


COMMAND = Command(
    "demo", "stream text from a stateful char-LSTM converted from OpenVINO IR", DESCRIPTION, configure, run
)

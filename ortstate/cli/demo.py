"""``ortstate demo``: stream text from a tiny stateful character LSTM, converted from OpenVINO IR.

The packaged IR (``_demo/char_lstm.xml``, made by ``models/train_char_lstm.py``) is what OpenVINO
users ship: a one-character step model whose LSTM state lives in ReadValue/Assign variables. The
demo converts it with :func:`ortstate.convert`, feeds the prompt one character per run (only the
variables carry the context), streams greedy characters to stdout, resets the state and shows that
a new stream starts fresh, and prints per-step latencies. With OpenVINO installed it runs OpenVINO's
own stateful ``InferRequest`` on the same IR and reports whether both produced the same characters.

Generated text goes to stdout; everything else to stderr. Exit code 0, or 1 if OpenVINO disagrees
or a reset did not start afresh, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..convert import convert
from ..errors import OrtStateError
from ..model_meta import read_meta
from ..runtime import StatefulSession
from ..runtime.options import default_session_options
from .args import add_form_option

DEMO_DIR = Path(__file__).resolve().parent.parent / "_demo"
SECOND_PROMPT = "Errors should"  # the "different prompt" after a reset
TEMPERATURE = 0.8  # sampling temperature when --seed is given

Step = Callable[[int], np.ndarray]  # one character index in, the next character's logits out


@dataclass
class Stream:
    """What one prompt-then-generate pass produced."""

    text: str = ""
    logits: list[np.ndarray] = field(default_factory=list)
    step_us: list[float] = field(default_factory=list)


@dataclass
class Vocab:
    """``vocab.json``: characters in index order and the IR's input/output names."""

    chars: list[str]
    input_name: str
    output_name: str

    @classmethod
    def load(cls, path: Path) -> Vocab:
        meta = json.loads(path.read_text(encoding="utf-8"))
        return cls(meta["chars"], meta["input"]["name"], meta["output"]["name"])

    def index(self, text: str) -> list[int]:
        lookup = {ch: i for i, ch in enumerate(self.chars)}
        unknown = sorted({ch for ch in text if ch not in lookup})
        if unknown:
            raise ValueError(f"characters not in the demo's vocabulary: {''.join(unknown)!r}")
        return [lookup[ch] for ch in text]


def _picker(seed: int | None) -> Callable[[np.ndarray], int]:
    """Greedy without a seed; otherwise sampling at TEMPERATURE with pre-drawn uniforms, so two
    runtimes given the same seed pick the same characters from (nearly) the same logits."""
    if seed is None:
        return lambda logits: int(np.argmax(logits))
    rng = np.random.default_rng(seed)

    def sample(logits: np.ndarray) -> int:
        z = logits.astype(np.float64).ravel() / TEMPERATURE
        p = np.exp(z - z.max())
        cdf = np.cumsum(p / p.sum())
        return int(min(np.searchsorted(cdf, rng.random(), side="right"), len(cdf) - 1))

    return sample


def stream(
    step: Step,
    vocab: Vocab,
    prompt: str,
    count: int,
    seed: int | None,
    echo: Callable[[str], None] | None = None,
) -> Stream:
    """Feed ``prompt`` one character per run, then generate ``count`` characters, one run each."""
    out = Stream()
    pick = _picker(seed)
    logits = np.zeros(len(vocab.chars), np.float32)
    ids = vocab.index(prompt)
    for i in range(len(ids) + count):
        if i < len(ids):
            char = ids[i]
        else:
            char = pick(logits)
            out.text += vocab.chars[char]
            if echo:
                echo(vocab.chars[char])
        if i == len(ids) + count - 1:
            break  # the last generated character needs no further run
        start = time.perf_counter()
        logits = np.asarray(step(char)).ravel()
        out.step_us.append((time.perf_counter() - start) * 1e6)
        out.logits.append(logits.copy())
    return out


def _ortstate_step(xml: Path, vocab: Vocab, form: str) -> tuple[Step, Callable[[], None], str, float]:
    start = time.perf_counter()
    model = convert(xml, explicit_state=form != "custom-op")
    options = default_session_options(read_meta(model))  # type: ignore[arg-type]
    options.intra_op_num_threads = 1  # a one-character step is far too small to split across threads
    options.inter_op_num_threads = 1
    session = StatefulSession(model, options, form=form)
    seconds = time.perf_counter() - start
    outputs = [vocab.output_name]

    def step(char: int) -> np.ndarray:
        return session.run(outputs, {vocab.input_name: np.array([[char]], np.int64)})[0]

    return step, session.reset_state, session.form, seconds


def _openvino_step(xml: Path, vocab: Vocab) -> tuple[Step, Callable[[], None]]:
    import openvino as ov

    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
    request = ov.Core().compile_model(str(xml), "CPU", config).create_infer_request()

    def step(char: int) -> np.ndarray:
        return request.infer({vocab.input_name: np.array([[char]], np.int64)})[vocab.output_name]

    return step, request.reset_state


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
        step, reset, form, seconds = _ortstate_step(xml, vocab, args.form)
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
        ov_step, ov_reset = _openvino_step(xml, vocab)
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

"""``ortstate bench``: per-step latency of a stateful IR in OpenVINO and ortstate, side by side."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

from .. import timing
from ..errors import OrtStateError, OutputFileError, RunError, UsageError
from ..output_files import check_writable, write_text
from ..timing import llm_streams, streams
from .args import add_verbose_option, existing_file, parse_shapes
from .command import EXIT_OK, Command
from .report import count, progress

__all__ = ["COMMAND"]

DESCRIPTION = """\
Time one model step, run after run, in OpenVINO's own stateful InferRequest (infer(feeds), and
with share_inputs=True, its fastest way), in ortstate's custom-op form (through its Python state
ops), the same model with StatefulSession's default form="auto" (rewritten into the explicit form
on load), the explicit form, and on the floor: the explicit graph in a bare ONNX Runtime session
with its states as plain inputs/outputs (onnxruntime's own session object, two pre-bound IOBindings
over two state buffer sets), i.e. the same compute with no state management: the leanest loop
there is, which ortstate can approach but not beat. Rounds alternate the runners' order to cancel
drift; each round resets the state first. Prints a markdown table: p50/p90/p99 per step in µs and
the p50 ratios to the floor, to OpenVINO's fastest way (× OpenVINO) and to its plain infer(feeds).

Inputs are made from the IR's Parameters. A stateful decoder (an optimum-intel LLM) is fed as
generate feeds it: prefilled to --position tokens, then timed on one-token decode steps. Other
models get random values (ints 0, floats ~N(0, 0.5), dynamic dims 1; --shape sets an input's whole
shape, e.g. an image's) every step. Progress goes to stderr when it is a terminal.

With --streams N1,N2,...: many streams at once instead. For each count N, N independent streams
each take --steps steps, served by one StreamPool (a tick steps all N in one batched run), by one
StatefulSession request per stream, and by one OpenVINO InferRequest per stream; prints aggregate
steps/s, a stream's p50/p99 step latency (the pool's is its tick's) and the pool's throughput over
each other way.

With --llm-streams N1,N2,... and an optimum-intel export folder as MODEL: many generations at once.
For each count N, N prompts of --prompt random ids are requested at once and each generates --new
greedy tokens, served by ortstate's ContinuousBatcher (continuous batching on a KV stream pool:
"pool", N async stream() consumers on one event loop; "pool-many", one generate_many call), by
one Generator one prompt after another, and by OpenVINO GenAI's ContinuousBatchingPipeline with the
exact config where openvino-genai is installed; each warmed up at the largest N, then --rounds
rounds alternating their order; prints the medians of aggregate output tokens/s (and its ratio
to one at a time), time to first token and inter-token latency p50/p99, and how many streams'
tokens equal the one-at-a-time run's. (benchmarks/llm_streams.py measures each engine in a process
of its own, with peak memory.)

examples:
  ortstate bench models/lstm_1l/model.xml
  ortstate bench models/lstm_1l/model.xml --streams 1,64,1024 --steps 50
  ortstate bench models/llm/llama --llm-streams 1,8,64 --prompt 16 --new 32
  ortstate bench model.xml --steps 500 --rounds 7 --threads 2
  ortstate bench openvino_vision_embeddings_model.xml --shape pixel_values=1,3,16,16
  ortstate bench models/llm/llama/openvino_model.xml --position 64 --json out/llama.json --plot out/llama.png"""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the IR's .xml (its .bin beside it); with --llm-streams, its folder")
    p.add_argument("--steps", type=int, default=200, metavar="N", help="timed steps per round (default 200)")
    p.add_argument(
        "--rounds", type=int, default=5, metavar="R", help="rounds per runner (default 5; --llm-streams: alternating)"
    )
    p.add_argument("--threads", type=int, default=1, metavar="T", help="intra-op threads (default 1)")
    p.add_argument(
        "--position",
        type=int,
        default=16,
        metavar="P",
        help="decoders: tokens in the cache when timing starts (default 16)",
    )
    p.add_argument("--shape", action="append", metavar="NAME=D0,D1", help="an input's shape (repeatable)")
    p.add_argument("--no-openvino", action="store_true", help="leave OpenVINO's rows out")
    p.add_argument(
        "--streams", metavar="N1,N2", help="many streams at once: a StreamPool against one request per stream"
    )
    p.add_argument(
        "--llm-streams",
        metavar="N1,N2",
        help="many generations at once on an LLM export folder: ContinuousBatcher, one at a time, OpenVINO GenAI",
    )
    p.add_argument("--prompt", type=int, default=128, metavar="P", help="--llm-streams: prompt tokens (default 128)")
    p.add_argument("--new", type=int, default=64, metavar="G", help="--llm-streams: new tokens (default 64)")
    p.add_argument("--json", metavar="OUT", help="write the results as JSON")
    p.add_argument("--markdown", metavar="OUT", help="write the table as markdown")
    p.add_argument("--plot", metavar="OUT.png", help="draw the p50s (needs matplotlib: the plot extra)")
    add_verbose_option(p)


def _progress(message: str) -> None:
    progress(f"bench: {message}")


def run(args: argparse.Namespace) -> int:
    if args.llm_streams is not None:
        return _run_llm_streams(args)
    xml = existing_file(args.model, "an IR .xml")
    if xml.suffix != ".xml":
        raise UsageError(f"{xml}: expected an OpenVINO IR .xml")
    for option in ("steps", "rounds", "threads"):
        if getattr(args, option) < 1:
            raise UsageError(f"--{option} must be at least 1, got {getattr(args, option)}")
    counts = _stream_counts(args.streams) if args.streams is not None else None
    problem = timing.plot_unavailable(args.plot) if args.plot else None
    if problem:  # say so before minutes of measuring, not after
        raise UsageError(f"--plot: {problem}")
    for option in ("json", "markdown", "plot"):  # before minutes of measuring
        if getattr(args, option):
            _output(option, functools.partial(check_writable, getattr(args, option)))
    if counts is not None:
        return _run_streams(args, xml, counts)
    try:
        workload = timing.model_workload(xml, args.steps, args.position, shapes=parse_shapes(args.shape))
    except ValueError as exc:
        raise UsageError(f"{xml}: {exc}") from None
    if workload.rules is not None and workload.rules.notes:
        print(f"ortstate: note: {xml}: {'; '.join(workload.rules.notes)}", file=sys.stderr)
    limit = timing.max_positions(xml)
    if limit is not None and args.position + args.steps > limit and workload.prefill:
        print(
            f"ortstate: note: positions up to {args.position + args.steps} exceed max_position_embeddings={limit}",
            file=sys.stderr,
        )
    names = [n for n in timing.RUNNERS if not (args.no_openvino and n.startswith("openvino"))]
    progress(f"bench: {xml.name}: converting and loading {len(names)} runners")
    runners, skipped = timing.make_runners(workload, args.threads, names)
    if "custom-op" in skipped and "explicit" in skipped:
        raise OrtStateError(f"{xml}: cannot run in ortstate: {skipped['custom-op']}")
    try:
        result = timing.measure(
            workload, runners, args.rounds, threads=args.threads, skipped=skipped, progress=_progress
        )
    except RunError as exc:
        fed = workload.prefill[0] if workload.prefill else workload.steps[0]
        shown = ", ".join(f"{n} {v.dtype}[{','.join(map(str, v.shape))}]" for n, v in fed.items())
        remedy = workload.rules.remedy if workload.rules is not None else ""
        remedy = remedy or "give fitting shapes with --shape NAME=D0,D1,..."
        raise RunError(f"{xml}: {exc}; the inputs were {shown}: {remedy}") from None
    table = timing.markdown_table(result)
    head = (
        f"{workload.model}: {workload.description}; weights {workload.precision}; "
        f"{count(args.steps, 'step')} × {count(args.rounds, 'round')}, {count(args.threads, 'thread')}"
    )
    print(f"{head}\n\n{table}")
    if args.markdown:
        _output("markdown", lambda: write_text(args.markdown, f"{head}\n\n{table}\n"))
    if args.json:
        _output("json", lambda: write_text(args.json, json.dumps(timing.document([result]), indent=1) + "\n"))
    if args.plot:
        _output("plot", lambda: timing.plot_results([result], args.plot))
    return EXIT_OK


def _stream_counts(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        raise UsageError(f"--streams {text}: stream counts are integers separated by commas, e.g. 1,64,1024") from None
    if not counts or min(counts) < 1:
        raise UsageError(f"--streams {text}: every stream count must be at least 1")
    return counts


def _run_streams(args: argparse.Namespace, xml: Path, counts: list[int]) -> int:
    runners = [r for r in streams.STREAM_RUNNERS if not (args.no_openvino and r == "openvino")]
    if "openvino" in runners and streams.openvino_unavailable():
        print(f"ortstate: note: {streams.openvino_unavailable()}: no OpenVINO rows", file=sys.stderr)
        runners.remove("openvino")
    rows = streams.measure_streams(xml, counts, args.steps, args.threads, runners, progress=_progress)
    head = f"{xml}: {count(args.steps, 'step')} per stream, {count(args.threads, 'thread')}"
    table = streams.streams_table(rows)
    print(f"{head}\n\n{table}")
    if args.markdown:
        _output("markdown", lambda: write_text(args.markdown, f"{head}\n\n{table}\n"))
    if args.json:
        document = {
            "model": str(xml),
            "steps": args.steps,
            "threads": args.threads,
            "rows": streams.streams_document(rows),
        }
        _output("json", lambda: write_text(args.json, json.dumps(document, indent=1) + "\n"))
    if args.plot:
        _output("plot", lambda: streams.plot_streams(rows, args.plot, xml.parent.name))
    return EXIT_OK


def _run_llm_streams(args: argparse.Namespace) -> int:
    folder = Path(args.model)
    if not folder.is_dir():
        raise UsageError(f"{folder}: --llm-streams takes an optimum-intel export folder")
    counts = _stream_counts(args.llm_streams)
    for option in ("prompt", "new", "threads", "rounds"):
        if getattr(args, option) < 1:
            raise UsageError(f"--{option} must be at least 1, got {getattr(args, option)}")
    for option in ("json", "markdown"):
        if getattr(args, option):
            _output(option, functools.partial(check_writable, getattr(args, option)))
    runners = list(llm_streams.LLM_RUNNERS)
    unavailable = llm_streams.openvino_genai_unavailable()
    if unavailable or args.no_openvino:
        runners.remove("openvino-genai")
        if unavailable and not args.no_openvino:
            print(f"ortstate: note: {unavailable}: no OpenVINO GenAI rows", file=sys.stderr)
    rows = llm_streams.measure_llm_streams(
        folder, counts, args.prompt, args.new, args.threads, runners, progress=_progress, rounds=args.rounds
    )
    head = (
        f"{folder}: prompts of {args.prompt} random ids, {args.new} new greedy tokens, "
        f"{count(args.threads, 'thread')}, medians of {count(args.rounds, 'round')}"
    )
    table = llm_streams.llm_table(rows)
    print(f"{head}\n\n{table}")
    if args.markdown:
        _output("markdown", lambda: write_text(args.markdown, f"{head}\n\n{table}\n"))
    if args.json:
        document = {"model": str(folder), "prompt": args.prompt, "new": args.new, "threads": args.threads}
        document["rounds"] = args.rounds
        document["rows"] = llm_streams.llm_document(rows)
        _output("json", lambda: write_text(args.json, json.dumps(document, indent=1) + "\n"))
    return EXIT_OK


def _output(option: str, write: Callable[[], None]) -> None:
    """Run ``write``; a file it cannot write is named with its option."""
    try:
        write()
    except OutputFileError as exc:
        raise OutputFileError(f"--{option} {exc}") from None


COMMAND = Command("bench", "time steps in OpenVINO and ortstate side by side", DESCRIPTION, configure, run)

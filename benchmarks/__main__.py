"""``python -m benchmarks`` lists the suites; ``python -m benchmarks NAME [args...]`` runs one."""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple

from benchmarks import common  # noqa: F401  (first: it keeps the environment the measuring processes get)


class Suite(NamedTuple):
    module: str  # benchmarks.MODULE
    summary: str
    entry: str = "main"  # its function taking the arguments after NAME
    preset: tuple[str, ...] = ()  # arguments given before the caller's


SUITES = {
    "per-step": Suite("run", "per-step latency against OpenVINO and the floor: results/latest.{md,json}, plots"),
    "real-size": Suite("realsize", "a real-size LLM's size, memory, speed and tokens against OpenVINO"),
    "context": Suite(
        "realsize",
        "the real-size LLM against context length (real-size with --contexts 32,1024,2048,4000)",
        preset=("--contexts", "32,1024,2048,4000", "--name", "realsize-context"),
    ),
    "real-size-build": Suite("realsize_build", "build the real-size IRs (run by a Python with optimum-intel)"),
    "real-size-profile": Suite("realsize_profile", "where the real-size LLM's decode time goes, by part"),
    "grouped": Suite("realsize_grouped", "the grouped decode step against GroupQueryAttention (real-size int4)"),
    "streams": Suite("streams", "StreamPool against one request per stream, 1 to 1024 streams"),
    "llm-streams": Suite("llm_streams", "many LLM streams at once: ContinuousBatcher against OpenVINO GenAI"),
    "llm-streams-profile": Suite(
        "llm_streams_profile", "where ContinuousBatcher's time goes on a real-size LLM: runs by kind and kernel"
    ),
    "llm-prefix": Suite(
        "llm_prefix", "prefix caching (chat, shared system prompt) and structured output against OpenVINO GenAI"
    ),
    "serve": Suite("serve", "ortstate serve: 256 WebSocket streams from another process (--durable too)"),
    "openai-serve": Suite("openai_serve", "an LLM over OpenAI's API against the same batcher in process"),
    "native": Suite("suite", "converted recurrent models against their native ONNX export", "native_main"),
    "concurrency": Suite("suite", "concurrent requests of one session in 1 and 2 threads", "concurrency_main"),
    "weights-kernels": Suite("weights_kernels", "the compressed-weight kernels behind the converter's choices"),
    "grammar-masks": Suite("grammar_masks", "grammar engines' per-step masks on a 151,936-token vocabulary"),
}


def usage() -> str:
    width = max(map(len, SUITES))
    lines = [f"  {name:{width}}  {suite.summary}" for name, suite in SUITES.items()]
    return (
        "usage: python -m benchmarks NAME [args...]   (NAME --help: its options)\n\n"
        "ortstate's benchmarks; results go to benchmarks/results/ (--out elsewhere where a suite has it).\n\n"
        "suites:\n" + "\n".join(lines)
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    suite = SUITES.get(name)
    if suite is None:
        print(f"python -m benchmarks: no suite {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    sys.argv = [f"python -m benchmarks {name}", *rest]  # the suite's own --help names the entry point
    run = getattr(importlib.import_module(f"benchmarks.{suite.module}"), suite.entry)
    return run([*suite.preset, *rest]) or 0


if __name__ == "__main__":
    raise SystemExit(main())

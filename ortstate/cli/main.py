"""``ortstate`` command line: argument parsing, the subcommand registry and error reporting."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import NoReturn

from ..errors import InputError, IRFileError, OpenVINOUnavailable, OrtStateError, OutputFileError, UsageError
from ..progress import shown
from ..runtime import options as ort_options
from ..version import __version__
from . import cmd_bench, cmd_convert, cmd_demo, cmd_export, cmd_generate, cmd_inspect, cmd_run, cmd_serve, cmd_verify
from .command import EXIT_FAILURE, EXIT_USAGE, Command

__all__ = ["COMMANDS", "build_parser", "main"]

# Subcommands in the order ``--help`` lists them. To add one, write a module defining a Command
# and add it here.
COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        cmd_demo.COMMAND,
        cmd_convert.COMMAND,
        cmd_inspect.COMMAND,
        cmd_run.COMMAND,
        cmd_generate.COMMAND,
        cmd_export.COMMAND,
        cmd_verify.COMMAND,
        cmd_bench.COMMAND,
        cmd_serve.COMMAND,
    )
}

DESCRIPTION = """\
Run OpenVINO stateful models (ReadValue/Assign: LSTM states, LLM KV caches) in ONNX Runtime:
demo (the main job in one command), convert an IR (model.xml + model.bin) to ONNX, inspect a model,
run it step by step keeping its variables, generate with an optimum-intel LLM folder, export that
folder for other tools, verify it against OpenVINO, bench it beside OpenVINO, and serve many
streams of it (or an LLM with OpenAI's API)."""

EPILOG = """\
examples:
  ortstate demo                                 # a stateful char-LSTM streaming text, next to OpenVINO
  ortstate convert model.xml                    # writes model.onnx beside model.xml
  ortstate convert model.xml --explicit-state   # variables as graph inputs/outputs (model.explicit.onnx)
  ortstate inspect model.xml                    # inputs, outputs, variables, ops, unsupported ops
  ortstate run model.onnx --input x=x.npy --steps 5
  ortstate verify model.xml --both              # both ONNX forms against OpenVINO, through a reset
  ortstate export qwen2-ov/ qwen2-genai/        # an optimum-intel LLM folder for onnxruntime-genai
  ortstate serve model.xml --port 8000          # many streams over WebSockets, batched (serve extra)
  ortstate COMMAND --help                       # the options and examples of one command

exit codes: 0 success; 1 the model could not be converted, loaded or run (a malformed model file
included), or did not match OpenVINO; 2 a bad command line: a wrong option, a file or folder that is
missing or cannot be opened (an IR's .bin included), an output file that cannot be written (written
whole or not at all: the files there are left as they were), inputs that do not fit the model, or
OpenVINO missing for verify. Errors are one line on stderr; --verbose (where a command has it) also
lets ONNX Runtime's own log through."""

# ONNX Runtime's log severity under --verbose: warnings and errors (1 and 0 add pages of info).
VERBOSE_LOG_SEVERITY = 2


class _Parser(argparse.ArgumentParser):
    """Reports command-line mistakes as one ``ortstate: error:`` line (see :func:`main`)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _version() -> str:
    parts = []
    for dist in ("onnxruntime", "onnxruntime-extensions", "onnx", "openvino"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return f"ortstate {__version__} ({', '.join(parts)})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ortstate",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    for command in COMMANDS.values():
        p = sub.add_parser(
            command.name,
            help=command.summary,
            description=command.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(p)
    return parser


def _fail(message: object, code: int) -> int:
    text = " ".join(str(message).split()) or "unknown error"
    print(f"ortstate: error: {text}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ortstate`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"no command given; commands: {', '.join(COMMANDS)} (see 'ortstate --help')")
        return _run(COMMANDS[args.command], args)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    except (UsageError, InputError, OpenVINOUnavailable, IRFileError, OutputFileError) as exc:
        return _fail(exc, EXIT_USAGE)
    except FileNotFoundError as exc:
        return _fail(f"{exc.filename}: no such file" if exc.filename else exc, EXIT_USAGE)
    except OrtStateError as exc:
        return _fail(exc, EXIT_FAILURE)
    except BrokenPipeError:  # stdout closed early (`ortstate ... | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exiting does not flush into it
        return EXIT_FAILURE
    except OSError as exc:  # a file named on the command line cannot be opened or written
        return _fail(f"{exc.filename}: {exc.strerror}" if exc.filename else exc, EXIT_USAGE)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as exc:  # noqa: BLE001 - a bug: one line unless asked for the traceback
        if os.environ.get("ORTSTATE_TRACEBACK"):
            raise
        message = f"internal error: {type(exc).__name__}: {exc} (set ORTSTATE_TRACEBACK=1 to see where)"
        return _fail(message, EXIT_FAILURE)


def _run(command: Command, args: argparse.Namespace) -> int:
    """Run ``command``, with ONNX Runtime's log let through for its duration under ``--verbose``."""
    with shown():  # long work's progress bars, on a terminal
        if not getattr(args, "verbose", False):
            return command.run(args)
        quiet = ort_options.log_severity()
        ort_options.set_log_severity(VERBOSE_LOG_SEVERITY)
        try:
            return command.run(args)
        finally:
            ort_options.set_log_severity(quiet)

"""A subcommand as data: its name, help, how it adds its arguments and what it runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "Command"]

EXIT_OK = 0
EXIT_FAILURE = 1  # the model could not be converted, loaded or run (malformed files included), or did not match
EXIT_USAGE = 2  # the command line is wrong: an option, a missing or unopenable file, inputs that don't fit


@dataclass(frozen=True)
class Command:
    """One ``ortstate NAME`` subcommand.

    Attributes:
        name: the subcommand.
        summary: one line for ``ortstate --help``.
        description: ``ortstate NAME --help`` text, ending with examples.
        configure: adds the subcommand's arguments to its parser.
        run: does the work and returns the exit code; raises ``UsageError`` or ``OrtStateError``.
    """

    name: str
    summary: str
    description: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]

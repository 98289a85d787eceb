"""The ``ortstate`` command line (``ortstate --help``)."""

from .command import Command
from .main import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

"""The help a newcomer reads: the top-level description names every command, ``--form``'s help is
each command's own (not copied from another's), and ``--idle-park`` says what it does by default."""

from __future__ import annotations

import argparse

from ortstate.cli import COMMANDS
from ortstate.cli.main import DESCRIPTION, build_parser


def test_the_description_names_every_command():
    for name in COMMANDS:
        assert name in DESCRIPTION.split(), name


def _options(name: str) -> list[argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return [a for a in sub._actions if a.option_strings and a.dest != "help"]


def test_no_option_help_is_copied_between_commands():
    seen: dict[str, str] = {}
    for name in COMMANDS:
        for action in _options(name):
            key = f"{action.option_strings[0]}: {action.help}"
            if action.option_strings[0] == "--form":
                assert seen.setdefault(key, name) == name, f"{name}'s --form help is {seen[key]}'s"


def test_idle_park_says_its_default():
    (action,) = [a for a in _options("serve") if a.dest == "idle_park"]
    assert action.default is None and "default: never" in action.help

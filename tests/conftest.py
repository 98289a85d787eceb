"""Suite-wide set-up: the shared helpers (``oracle.py``) importable from every test folder, and a
record of which registered translators each test file exercises (for ``test_registry.py``)."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ortstate.convert.registry import observe  # noqa: E402

TESTS = Path(__file__).resolve().parent
OP_TESTS = TESTS / "convert" / "ops"


@dataclass
class TranslatorUses:
    """Which translators ((op type, first version)) ran during the tests of each test file, and
    whether this session runs every op test (only then can a missing one be told from a deselected one)."""

    by_file: dict[Path, set[tuple[str, int]]] = field(default_factory=lambda: defaultdict(set))
    all_op_tests: bool = False


_USES = TranslatorUses()
_DESELECTED_OP_TESTS: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    used = _USES.by_file[Path(item.path).resolve()]
    with observe(lambda op_type, since: used.add((op_type, since))):
        yield


def pytest_deselected(items: list[pytest.Item]) -> None:
    _DESELECTED_OP_TESTS.extend(i.nodeid for i in items if OP_TESTS in Path(i.path).resolve().parents)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``runs_last`` run after all others (they read what the others recorded)."""
    items.sort(key=lambda item: item.get_closest_marker("runs_last") is not None)


def pytest_collection_finish(session: pytest.Session) -> None:
    selected = {Path(i.path).resolve() for i in session.items}
    _USES.all_op_tests = not _DESELECTED_OP_TESTS and all(p.resolve() in selected for p in OP_TESTS.glob("test_*.py"))


@pytest.fixture(scope="session")
def translator_uses() -> TranslatorUses:
    return _USES

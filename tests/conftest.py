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
from ortstate.errors import RuntimeTooOldError  # noqa: E402

TESTS = Path(__file__).resolve().parent
OP_TESTS = TESTS / "convert" / "ops"
# CI runs tests/streams and tests/serve on every supported Python (.ci/run). Python 3.10's newest
# onnxruntime wheel (1.23) has no `causal` attribute on GroupQueryAttention, which every LLM
# export's attention runs on: on 3.10, and only there, the files below (their servers run in
# subprocesses) skip, and any other test that meets RuntimeTooOldError while setting up or running
# (loading an LLM export in process) is reported skipped, not failed.
LLM_FILES = {
    TESTS / "streams" / "test_pool_kv.py",
    TESTS / "streams" / "test_pool_kv_decode.py",
    TESTS / "serve" / "test_serve_llm.py",
    TESTS / "serve" / "test_openai.py",
    TESTS / "serve" / "test_openai_errors.py",
    TESTS / "serve" / "test_openai_conversations.py",
    TESTS / "serve" / "test_conversations_durable.py",
    TESTS / "serve" / "test_conversations_bounded.py",
    TESTS / "serve" / "test_ray_llm.py",
    TESTS / "serve" / "test_openai_logprobs.py",
    TESTS / "serve" / "test_openai_hostile.py",
    TESTS / "serve" / "test_connection_deadlines.py",
}
NO_LLM_ON_310 = "onnxruntime 1.23, the last with a Python 3.10 wheel, has no GroupQueryAttention causal attribute"


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
    """Tests marked ``runs_last`` run after all others (they read what the others recorded); on
    Python 3.10, those of ``LLM_FILES`` are skipped."""
    items.sort(key=lambda item: item.get_closest_marker("runs_last") is not None)
    if sys.version_info < (3, 11):
        for item in items:
            if Path(item.path).resolve() in LLM_FILES:
                item.add_marker(pytest.mark.skip(reason=NO_LLM_ON_310))


def _too_old(exc: BaseException | None) -> bool:
    """Whether ``exc`` or what it was raised from is ONNX Runtime too old for the model."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, RuntimeTooOldError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if sys.version_info < (3, 11) and report.failed and call.excinfo is not None and _too_old(call.excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {NO_LLM_ON_310}")


def pytest_collection_finish(session: pytest.Session) -> None:
    selected = {Path(i.path).resolve() for i in session.items}
    _USES.all_op_tests = not _DESELECTED_OP_TESTS and all(p.resolve() in selected for p in OP_TESTS.glob("test_*.py"))


@pytest.fixture(scope="session")
def translator_uses() -> TranslatorUses:
    return _USES

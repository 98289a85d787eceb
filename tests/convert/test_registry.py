"""``convert/registry.py``: translators keyed by op type and version, and the check that the op
tests mirror the op modules and exercise every registered translator."""

from __future__ import annotations

from pathlib import Path

import pytest

from ortstate.convert import ops as op_modules
from ortstate.convert.registry import lookup, observe, registered, translator, translator_for

OP_MODULES = Path(op_modules.__file__).parent
OP_TESTS = Path(__file__).resolve().parent / "ops"


def test_versions_resolve_to_the_latest_translator_not_after_them() -> None:
    assert registered()["Gather"] == [1, 7, 8]
    assert lookup("Gather", 1) is lookup("Gather", 6) is not lookup("Gather", 7)
    assert lookup("Gather", 8) is lookup("Gather", 99)
    assert lookup("TopK", None) is None and lookup("NoSuchOp", 1) is None


def test_a_version_registered_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="translator for Gather-8 registered twice"):
        translator("Gather", 8)(lookup("Gather", 8))  # type: ignore[arg-type]


def test_observers_see_translators_used_not_looked_up() -> None:
    seen: list[tuple[str, int]] = []
    with observe(lambda op_type, since: seen.append((op_type, since))):
        lookup("Gather", 7)
        assert translator_for("Gather", 7) is lookup("Gather", 7)
        assert translator_for("NoSuchOp", 1) is None
    translator_for("Gather", 8)  # after the block: not seen
    assert seen == [("Gather", 7)]


def test_op_tests_mirror_op_modules() -> None:
    """``tests/convert/ops/test_<module>.py`` for each ``ortstate/convert/ops/<module>.py``, and nothing else."""
    modules = {p.stem for p in OP_MODULES.glob("*.py")} - {"__init__"}
    tests = {p.stem.removeprefix("test_") for p in OP_TESTS.glob("test_*.py")}
    assert sorted(modules - tests) == [], "op modules without a test file"
    assert sorted(tests - modules) == [], "op test files without an op module"


@pytest.mark.runs_last
def test_every_registered_translator_is_exercised_by_its_op_tests(translator_uses) -> None:  # noqa: ANN001
    """Each registered (op type, version) translated some layer during the tests of its module's test
    file. Runs after every other test, and only in a session that runs all of tests/convert/ops."""
    if not translator_uses.all_op_tests:
        pytest.skip("needs every test of tests/convert/ops in the same session")
    missing = []
    for op_type, versions in registered().items():
        for since in versions:
            module = lookup(op_type, since).__module__.rsplit(".", 1)[-1]  # type: ignore[union-attr]
            if (op_type, since) not in translator_uses.by_file.get(OP_TESTS / f"test_{module}.py", ()):
                missing.append(f"{op_type}-{since} (in {module}.py)")
    assert missing == [], f"translators no test of tests/convert/ops/test_<module>.py runs: {', '.join(missing)}"

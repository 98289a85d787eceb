"""A part whose optional extra is missing says which extra and how to install it, the same way
everywhere: ``import ortstate.serve`` without the serve extra is a ``MissingExtraError`` (an
``OrtStateError`` and an ``ImportError``), not the first missing module's own error."""

from __future__ import annotations

import subprocess
import sys

import pytest
from oracle import REPO

from ortstate.extras import EXTRAS, install_hint

HIDE = "import sys\nfor m in {modules!r}: sys.modules[m] = None\n"


def test_serve_without_its_extra_names_the_extra():
    code = HIDE.format(modules=["starlette"]) + (
        "import ortstate\n"
        "try:\n    import ortstate.serve\n"
        "except ImportError as exc:\n"
        "    assert isinstance(exc, ortstate.OrtStateError), type(exc)\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    want = f"ortstate.serve needs the serve extra (starlette missing): {install_hint('serve')}"
    assert done.stdout.strip() == want


def test_the_cli_says_the_same(tmp_path):
    code = HIDE.format(modules=["uvicorn"]) + "from ortstate.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    done = subprocess.run(
        [sys.executable, "-c", code, "serve", str(REPO / "models" / "accumulator" / "model.xml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    want = f"ortstate serve needs the serve extra (uvicorn missing): {install_hint('serve')}"
    assert done.stderr == f"ortstate: error: {want}\n"


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_every_extra_is_in_pyproject(extra):
    text = (REPO / "pyproject.toml").read_text()
    assert f"\n{extra} = [" in text

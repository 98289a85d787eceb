"""What every benchmark records and how it writes its results: the machine (CPU, its flags, cores),
the versions (ortstate's git commit among them), the load average, the results folder, and the
command that runs one of the benchmarks' modules in a process of its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

# the environment the measuring processes get: taken when the entry point starts, before anything
# imports ortstate or onnxruntime (which may set variables of their own)
START_ENV = dict(os.environ)
ROOT = Path(__file__).resolve().parent.parent  # the checkout: models/, docs/ and ortstate/ below it
RESULTS = ROOT / "benchmarks" / "results"
# the CPU features that move the engines' ratios (int8 dot products, wide vectors, bf16/AMX tiles)
FLAG_PATTERN = re.compile(r"^(avx2|fma|f16c|avx512.*|.*vnni.*|.*bf16.*|amx.*)$")


def cpu_flags() -> list[str]:
    """The CPU flags of :data:`FLAG_PATTERN` this machine has (``/proc/cpuinfo``; empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("flags"):
                return sorted(f for f in line.split(":", 1)[1].split() if FLAG_PATTERN.match(f))
    except OSError:
        pass
    return []


def machine() -> dict[str, Any]:
    """The machine and the versions (``ortstate.timing.machine_info``: CPU, cores, Python,
    onnxruntime, OpenVINO, numpy), with the CPU's flags."""
    from ortstate.timing import machine_info  # late: realsize-build runs without ortstate

    return machine_info() | {"cpu_flags": cpu_flags()}


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded to 0.01."""
    return [round(x, 2) for x in os.getloadavg()]


def ortstate_source(module: Any) -> str:
    """ortstate's version, and the git branch and commit of its checkout when it is one."""
    where = Path(module.__file__).parent.parent
    text = module.__version__
    try:
        git = ["git", "-C", str(where)]
        branch = subprocess.run([*git, "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True, text=True, check=True)
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        text += f" ({branch.stdout.strip()} {commit.stdout.strip()}{', modified' if dirty.stdout.strip() else ''})"
    except (OSError, subprocess.CalledProcessError):
        pass
    return text


def write_results(out: Path, name: str, doc: Any, markdown: str) -> None:
    """``out/NAME.json`` (``doc``, indented) and ``out/NAME.md`` (``markdown`` as given)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text(markdown, encoding="utf-8")


def child_command(module: str, *args: str, python: str | None = None) -> list[str]:
    """The command running ``benchmarks.MODULE`` in a process of its own (with :func:`child_env`)."""
    return [python or sys.executable, "-m", f"benchmarks.{module}", *args]


def child_env() -> dict[str, str]:
    """The environment of a child process: this checkout first on its path, so that it imports
    this checkout's ``benchmarks`` and ``ortstate`` wherever it is started from."""
    path = os.pathsep.join(filter(None, [str(ROOT), START_ENV.get("PYTHONPATH")]))
    return START_ENV | {"PYTHONPATH": path}

"""Run a scenario that may kill its process (a crash, an abort, Ctrl-C) in a fresh interpreter."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_isolated(
    code: str,
    *args: str,
    timeout: float = 180.0,
    memory: int = 6 << 30,
    sigint: signal.Handlers = signal.SIG_DFL,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) with ``args`` in ``sys.argv[1:]``, from the repository root, with the
    tests folder importable and at most ``memory`` bytes of address space (a runaway read fails
    there, not on the machine). The caller asserts on ``returncode``, ``stdout`` and ``stderr``: a
    negative return code is the signal that killed it (-11 a segfault, -6 an abort); a hang raises
    ``subprocess.TimeoutExpired``.

    The child starts with SIGINT at ``sigint``, whatever this process inherited: SIG_DFL as from an
    interactive shell (Python then installs its ``KeyboardInterrupt`` handler), SIG_IGN as a
    background job of a non-interactive shell or ``nohup`` starts it (Python then leaves it
    ignored)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        signal.signal(signal.SIGINT, sigint)

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])},
    )


def outcome(proc: subprocess.CompletedProcess[str]) -> str:
    """One line for assertion messages: the exit status and the end of stderr."""
    tail = proc.stderr.strip().splitlines()[-3:]
    return f"exit {proc.returncode}; stdout {proc.stdout.strip()[-300:]!r}; stderr {' | '.join(tail)[-500:]!r}"

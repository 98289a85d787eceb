"""What every benchmark records and how it writes its results: one document shape for every suite
(:func:`write_results`), the machine (from ortstate's own reader of the CPU), the versions, the
source (git commit, modified or not) and the load average before and after; the results folder;
the command that runs one of the benchmarks' modules in a process of its own.

A results document (``NAME.json``, schema :data:`SCHEMA`)::

    {"schema": "ortstate.results/1", "suite": "streams", "name": "streams",
     "started": "2026-11-27T15:28:05", "seconds": 69.2,
     "machine": {"cpu": "AMD EPYC", "cpu_flags": ["avx2", ...], "cores": 2},
     "load": {"before": [0.39, 0.5, 0.6], "after": [1.0, 0.7, 0.6]},
     "versions": {"python": "3.11.7", "onnxruntime": "1.31.1", "openvino": "2026.4.1", "ortstate": "0.1.0", ...},
     "source": {"commit": "...", "branch": "main", "dirty": false},
     "images": ["streams_h16.png"],
     "data": {...}}

``data`` is the suite's own (its ``render`` reads it), everything else is the same for every suite;
``NAME.md`` beside it is rendered from the whole document, its ``# `` title first and its run's
``started`` in it (``scripts/make_performance_doc.py`` puts the ``.md`` files together). A value a
run did not record (results converted from before this shape) is null.

This module imports only the standard library at its top, so the entry point runs in any Python
(``real-size-build`` runs in a venv holding optimum-intel); what it reads of ortstate it imports
when a suite records a run.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

# the environment the measuring processes get: taken when the entry point starts, before anything
# imports ortstate or onnxruntime (which may set variables of their own)
START_ENV = dict(os.environ)
ROOT = Path(__file__).resolve().parent.parent  # the checkout: models/, docs/ and ortstate/ below it
RESULTS = ROOT / "benchmarks" / "results"
SCHEMA = "ortstate.results/1"
# the distributions whose versions a result records (None where one is not installed)
VERSIONED = ("numpy", "onnx", "onnxruntime", "onnxruntime-extensions", "openvino", "openvino-genai")
Render = Callable[[dict[str, Any]], str]  # a results document -> its markdown
Plots = Callable[[dict[str, Any], Path], Sequence[str]]  # (document, folder) -> the files drawn there


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded to 0.01."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """The CPU's model name, its vector extensions (``ortstate.timing.isa_flags``: what ortstate's
    kernels and ONNX Runtime's pick their paths by) and the number of cores."""
    from ortstate.timing import cpu_name, isa_flags  # late: see the module's docstring

    return {"cpu": cpu_name(), "cpu_flags": isa_flags(), "cores": os.cpu_count()}


def versions() -> dict[str, str | None]:
    """Python's, ortstate's and those of :data:`VERSIONED`."""
    from ortstate.version import __version__

    found: dict[str, str | None] = {"python": sys.version.split()[0]}
    for dist in VERSIONED:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found | {"ortstate": __version__}


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True).stdout.strip()


def source() -> dict[str, Any]:
    """The git commit and branch of the checkout ``import ortstate`` reads, and whether its tracked
    files differ from that commit (``dirty``); nulls where ortstate is not a checkout's."""
    import ortstate

    where = Path(ortstate.__file__).resolve().parent.parent
    try:
        if Path(_git(where, "rev-parse", "--show-toplevel")).resolve() != where:
            raise OSError  # an installed copy inside some other repository
        dirty = bool(_git(where, "status", "--porcelain", "--untracked-files=no"))
        return {
            "commit": _git(where, "rev-parse", "HEAD"),
            "branch": _git(where, "branch", "--show-current") or None,  # None: a detached HEAD
            "dirty": dirty,
        }
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "branch": None, "dirty": None}


@dataclass(frozen=True)
class Run:
    """One run of a suite, as :func:`start_run` found things when it began."""

    suite: str
    started: str  # local time, ISO 8601 to the second
    clock: float  # time.monotonic() then
    load_before: list[float]
    machine: dict[str, Any]
    versions: dict[str, str | None]
    source: dict[str, Any]


def start_run(suite: str) -> Run:
    """Record a run of ``suite`` beginning now (call it before measuring: the load average then is
    the one the results call "before"); a note on stderr when the machine is busy."""
    load = loadavg()
    found = machine()
    if load[0] >= (found["cores"] or 1) / 2:
        print(
            f"[{suite}] load average {load[0]:.2f} on {found['cores']} cores: the machine is busy, "
            "the figures will be rough (the results record it)",
            file=sys.stderr,
            flush=True,
        )
    started = datetime.datetime.now().isoformat(timespec="seconds")
    return Run(suite, started, time.monotonic(), load, found, versions(), source())


def write_results(
    out: Path, name: str, run: Run, data: dict[str, Any], render: Render, plots: Plots | None = None
) -> dict[str, Any]:
    """Write ``out/NAME.json`` (the results document of ``run``: its ``data``, the load average now as
    "after") and ``out/NAME.md`` (``render`` of that document); return the document. ``plots``, when
    given, draws the document's plots into ``out`` first and names the files it wrote (the document's
    ``images``, for the markdown to show). A suite may call it again as it goes (a killed run keeps
    what it measured).

    Raises:
        ValueError: ``render`` gave markdown without a ``# `` title first or without the run's start
            time (``make_performance_doc`` would refuse it).
    """
    doc = {
        "schema": SCHEMA,
        "suite": run.suite,
        "name": name,
        "started": run.started,
        "seconds": round(time.monotonic() - run.clock, 1),
        "machine": run.machine,
        "load": {"before": run.load_before, "after": loadavg()},
        "versions": run.versions,
        "source": run.source,
        "images": [],
        "data": data,
    }
    out.mkdir(parents=True, exist_ok=True)
    if plots is not None:
        doc["images"] = list(plots(doc, out))
    markdown = render(doc)
    if not markdown.startswith("# ") or run.started not in markdown:
        raise ValueError(f"{run.suite}: its markdown must open with a '# ' title and name its run ({run.started})")
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text(markdown.rstrip("\n") + "\n", encoding="utf-8")
    return doc


# what each field of a results document holds (its top level has these and no others)
_SHAPE: dict[str, tuple[type, ...]] = {
    "schema": (str,),
    "suite": (str,),
    "name": (str,),
    "started": (str, type(None)),
    "seconds": (int, float, type(None)),
    "machine": (dict,),
    "load": (dict,),
    "versions": (dict,),
    "source": (dict,),
    "images": (list,),
    "data": (dict,),
}
_PARTS = {
    "machine": ("cpu", "cpu_flags", "cores"),
    "load": ("before", "after"),
    "versions": ("python", "onnxruntime", "openvino", "ortstate"),
    "source": ("commit", "branch", "dirty"),
}


def shape_problems(doc: Any) -> list[str]:
    """What keeps ``doc`` from being a results document of :data:`SCHEMA` (nothing: it is one)."""
    if not isinstance(doc, dict):
        return [f"a JSON {type(doc).__name__}, not an object"]
    if doc.get("schema") != SCHEMA:
        return [f"schema {doc.get('schema')!r}, not {SCHEMA!r}"]
    problems = [f"no {key!r}" for key in _SHAPE if key not in doc]
    problems += [f"{key!r}: not a field of the shape" for key in doc if key not in _SHAPE]
    problems += [
        f"{key!r} is a {type(doc[key]).__name__}"
        for key, kinds in _SHAPE.items()
        if key in doc and not isinstance(doc[key], kinds)
    ]
    if not problems:
        problems += [f"no {key}.{part}" for key, parts in _PARTS.items() for part in parts if part not in doc[key]]
    return problems


_LABELS = {"python": "Python", "openvino": "OpenVINO", "openvino-genai": "OpenVINO GenAI"}


def _loads(values: Sequence[float] | None) -> str:
    return "n/a" if not values else "/".join(f"{x:.2f}" for x in values)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f" ({seconds:.0f} s)" if seconds < 600 else f" ({seconds / 60:.0f} min)"


def _ortstate(doc: dict[str, Any]) -> str:
    """``ortstate 0.1.0 (main 1a2b3c4d5e, modified)``: the version and the source measured."""
    s = doc["source"]
    text = f"ortstate {doc['versions'].get('ortstate') or 'n/a'}"
    if s.get("commit"):
        where = " ".join(filter(None, [s.get("branch"), s["commit"][:10]]))
        text += f" ({where}{', modified' if s.get('dirty') else ''})"
    return text


def plot_caption(doc: dict[str, Any]) -> str:
    """The conditions in one short line, for a plot's title."""
    m, v = doc["machine"], doc["versions"]
    return (
        f"{_ortstate(doc)}; {m.get('cpu') or 'CPU n/a'}, {m.get('cores') or '?'} cores (shared); onnxruntime "
        f"{v.get('onnxruntime') or 'n/a'}, OpenVINO {v.get('openvino') or 'n/a'}; {(doc['started'] or 'n/a')[:10]}"
    )


def conditions(doc: dict[str, Any]) -> str:
    """One paragraph for a rendering: when the run was, on what machine, with which versions and
    source, and how busy the machine was before and after (what to read its figures against)."""
    m, load = doc["machine"], doc["load"]
    flags = m.get("cpu_flags")
    flags_text = "flags not recorded" if flags is None else ", ".join(flags) or "no vector extensions"
    shown = [f"{_LABELS.get(k, k)} {val}" for k, val in doc["versions"].items() if val and k != "ortstate"]
    return (
        f"Run {doc['started'] or 'at a time not recorded'}{_duration(doc['seconds'])}; "
        f"{m.get('cpu') or 'CPU not recorded'}, {m.get('cores') or '?'} cores ({flags_text}); "
        f"{', '.join([*shown, _ortstate(doc)])}. Load average (1/5/15 min) {_loads(load['before'])} before, "
        f"{_loads(load['after'])} after: the machine is shared, read ratios between what ran in this run."
    )


def shown_path(path: Path) -> str:
    """``path`` as results show it: relative to the checkout when inside it, ``~/...`` under the home
    folder (results are committed and read elsewhere, where this machine's paths mean nothing)."""
    resolved = Path(path).expanduser().resolve()
    for base, shown in ((ROOT, ""), (Path.home().resolve(), "~/")):
        if resolved.is_relative_to(base):
            return shown + resolved.relative_to(base).as_posix()
    return str(path)


def child_command(module: str, *args: str, python: str | None = None) -> list[str]:
    """The command running ``benchmarks.MODULE`` in a process of its own (with :func:`child_env`)."""
    return [python or sys.executable, "-m", f"benchmarks.{module}", *args]


def child_env() -> dict[str, str]:
    """The environment of a child process: this checkout first on its path, so that it imports
    this checkout's ``benchmarks`` and ``ortstate`` wherever it is started from."""
    path = os.pathsep.join(filter(None, [str(ROOT), START_ENV.get("PYTHONPATH")]))
    return START_ENV | {"PYTHONPATH": path}

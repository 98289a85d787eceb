"""The README and docs/: links resolve, Python samples run and print what they say, the README's
command synopsis matches the CLI, and docs/performance.md is what benchmarks/results give."""

import argparse
import ast
import io
import os
import re
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import make_performance_doc as perfdoc  # noqa: E402

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# Every markdown file a reader reaches from the README.
PAGES = [README, *DOCS, ROOT / "benchmarks" / "README.md", ROOT / "models" / "README.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (links there are code, not links)."""
    return FENCE.sub("", text)


def anchors(page: Path) -> set[str]:
    return {perfdoc.slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", prose(page.read_text()), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page):
    """Every relative link names a file that exists, and a #anchor a heading of its page."""
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # a URL
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_doc_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(prose(README.read_text()))}
    assert [d.name for d in DOCS if d.resolve() not in linked] == []


# -- the repository stands alone -------------------------------------------------------------------
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".json", ".cfg", ".ini", ".yml", ".yaml", ".sh", ""}
# A name ending in .md, with the folders before it (``docs/api.md``, ``../README.md``).
CITED_DOC = re.compile(r"(?<![\w./-])((?:\.{1,2}/|[\w-][\w.-]*/)*[A-Za-z][\w.-]*\.md)\b")
CODE_SPAN = re.compile(r"``.*?``|`[^`\n]*`", re.S)
# An absolute path into someone's machine (``/tmp`` and system paths are the same everywhere).
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|Users|root|mnt|srv|data)/[\w.-]")


def repo_files() -> list[Path]:
    """The checkout's text files: what git tracks, or (no git) what a walk finds outside hidden,
    build and cache folders."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [ROOT / name for name in listed.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skip = {"__pycache__", "build", "dist", "out", "node_modules"}
        files = []
        for folder, dirs, names in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in skip and not d.endswith(".egg-info")]
            files += [Path(folder) / name for name in names]
    return [f for f in files if f.suffix in TEXT_SUFFIXES and f.is_file()]


def prose_of(path: Path, text: str) -> str:
    """What a reader reads as prose: a Python file's comments and docstrings, a Markdown file
    outside its code blocks; code spans taken out (a file name there is one code writes or takes)."""
    if path.suffix == ".py":
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        parts = [t.string for t in tokens if t.type == tokenize.COMMENT]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                parts.append(ast.get_docstring(node) or "")
        text = "\n".join(parts)
    elif path.suffix == ".md":
        text = prose(text)
    return CODE_SPAN.sub("", text)


def test_the_repository_cites_only_what_it_holds():
    """No file cites a document the checkout lacks (notes kept beside it, say ``../shared/NOTES.md``)
    or names an absolute path of the machine it was written on."""
    files = repo_files()
    assert ROOT / "README.md" in files and ROOT / "ortstate" / "runtime" / "pyops.py" in files
    names = {f.name for f in files}
    # A checkout straight in a scratch folder (a CI clone in /tmp) has no telling parent: the docs
    # rightly name /tmp (e.g. flock /tmp/realsize.lock).
    generic = {Path("/"), Path("/tmp"), Path("/var/tmp"), Path(tempfile.gettempdir())}
    beside = str(ROOT.parent).rstrip("/") + "/" if ROOT.parent.resolve() not in generic else None
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        where = path.relative_to(ROOT)
        for cited in CITED_DOC.findall(prose_of(path, text)):
            in_repo = [(path.parent / cited).resolve(), (ROOT / cited).resolve()]
            if not any(p.is_relative_to(ROOT) and p.exists() for p in in_repo) and Path(cited).name not in names:
                found.append(f"{where}: cites {cited}, which is not in the repository")
        for match in MACHINE_PATH.finditer(text):
            found.append(f"{where}: names the absolute path {text[match.start() :].split()[0][:60]}")
        if beside and beside in text:
            found.append(f"{where}: names a path beside the checkout ({beside})")
    assert not found, "\n".join(found)


def test_the_check_finds_what_it_looks_for():
    """What the test above must catch, and what it must let pass."""
    home = "/" + "home"  # spelled in two parts: this file is checked too
    text = f"""# see DESIGN.md and ../shared/STYLE.md; writes ``NAME.md``
x = "out.md"  # [docs](docs/api.md), https://x.org/y/README.md
run = "{home}/me/venv/bin/python ~/venvs/x /tmp/x.lock /usr/bin/env a{home}/b"
"""
    assert CITED_DOC.findall(prose_of(Path("x.py"), text)) == ["DESIGN.md", "../shared/STYLE.md", "docs/api.md"]
    assert [m.group() for m in MACHINE_PATH.finditer(text)] == [home + "/m"]


def test_readme_is_the_front_door():
    """Reference material goes to docs/: the README keeps the pitch, the commands, a sample, limits."""
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 120, f"README.md has {lines} lines: move reference material into docs/"


# The two commands a newcomer runs first, kept verbatim through every README rewrite.
INSTALL_AND_DEMO = "python -m venv .venv && . .venv/bin/activate && pip install '.[verify]' && ortstate demo"
TEST_COMMAND = (
    "rm -rf .venv-test && python -m venv .venv-test && . .venv-test/bin/activate && pip install '.[test]' "
    "&& python -m pytest"
)


def test_readme_keeps_the_install_and_test_commands_and_names_real_extras():
    from importlib.metadata import entry_points, metadata

    text = README.read_text(encoding="utf-8")
    assert [m.group(2).strip() for m in FENCE.finditer(text) if m.group(1) == "bash"] == [
        INSTALL_AND_DEMO,
        TEST_COMMAND,
    ]
    extras = set(metadata("ortstate").get_all("Provides-Extra"))
    quoted = set(re.findall(r"'\.\[(\w+)\]'", INSTALL_AND_DEMO + TEST_COMMAND))
    paragraph = text.split("\nExtras: ")[1].split("\n\n")[0]
    described = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", paragraph)))  # not what the (...) quote
    assert quoted <= extras and described == extras, (quoted, described, extras)
    assert [e.value for e in entry_points(group="console_scripts", name="ortstate")] == ["ortstate.cli:main"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install '.[test]'" in ci and "python -m pytest" in ci  # CI runs the README's test command


def test_readme_synopsis_names_every_command_once():
    from ortstate.cli import build_parser

    section = README.read_text(encoding="utf-8").split("## Command line")[1]
    block = section.split("```text\n")[1].split("```")[0]
    named = [line.split()[1] for line in block.splitlines() if line.startswith("ortstate ")]
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(named) == sorted(subparsers.choices)


# The explicit form's tensor names (docs/forms.md): spelled like Python names, but none.
TENSOR_NAMES = (
    "ortstate.request",
    "ortstate.in.",
    "ortstate.out.",
    "ortstate.init.",
    "ortstate.len.",
    "ortstate.len_out.",
    "ortstate.pool.",  # the KV pool's run inputs (passes/ragged_kv.py, passes/last_logits.py)
    "ortstate.split_max_rows.",  # the exact split's row limits (meta.SPLIT_ROWS), set at load
)


def test_python_names_in_the_docs_exist():
    """Every ``ortstate.x.y`` the README and docs name in code spans imports or is an attribute."""
    import importlib

    missing = set()
    for page in [README, *DOCS]:
        for name in re.findall(r"`(ortstate(?:\.\w+)+)", prose(page.read_text(encoding="utf-8"))):
            if (name + ".").startswith(TENSOR_NAMES):  # `ortstate.in.<id>` reads as ortstate.in
                continue
            parts, obj = name.split("."), None
            for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
                try:
                    obj = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                for attr in parts[cut:]:
                    obj = getattr(obj, attr, None)
                break
            if obj is None:
                missing.add(f"{page.name}: {name}")
    assert not missing, sorted(missing)


def test_inline_python_commands_run(tmp_path):
    """``python -c "..."`` commands quoted in the README's and docs' prose succeed."""
    commands = [c for page in [README, *DOCS] for c in re.findall(r'`python -c "([^"`]+)"`', prose(page.read_text()))]
    assert commands, "no inline python -c command found: the test reads nothing"
    for code in commands:
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, f"python -c {code!r}: {proc.stderr[-2000:]}"


def _printed(comment: str) -> str | None:
    """The output a ``print(...)  # comment`` promises: the comment up to its first complete
    Python literal (``acc [[2. 2. 2.]]``, ``['x']: what it is`` -> ``['x']``), or None for prose."""
    m = re.match(r"^(\w+ )?[\[{(']", comment)
    if not m:
        return None
    depth, quote = 0, ""
    for i, ch in enumerate(comment):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
            if depth == 0:
                return comment[: i + 1]
    return None


def python_samples():
    """(page, index, code) of every Python block in the README and docs/, except those that need an
    export the repository does not hold (they say ``path/to/``)."""
    for page in [README, *DOCS]:
        blocks = [m.group(2) for m in FENCE.finditer(page.read_text(encoding="utf-8")) if m.group(1) == "python"]
        for i, code in enumerate(blocks):
            if "path/to/" not in code:
                yield pytest.param(code, id=f"{page.relative_to(ROOT)}[{i}]")


def cannot_run_here(code: str) -> str | None:
    """Why a sample cannot run on this Python, or None. Only Python 3.10 lacks wheels the samples
    need (CI runs the docs' samples there too); on the Python the whole suite runs on, none is
    skipped."""
    if sys.version_info >= (3, 11):
        return None
    if "onnxruntime_genai" in code:
        return "onnxruntime-genai >= 0.18 has no wheel for Python 3.10"
    if "models/llm/" in code:  # an LLM export: its attention runs on GroupQueryAttention(causal=0)
        return "onnxruntime 1.23, the last with a Python 3.10 wheel, has no GroupQueryAttention causal attribute"
    return None


@pytest.mark.parametrize("code", list(python_samples()))
def test_python_sample_runs_and_prints_what_it_says(tmp_path, code):
    """Run as in a fresh clone (models/ there, nothing else: a sample that writes makes its own
    out/): it succeeds, each ``print`` whose comment shows a value prints that value, in order, and
    nothing lands outside out/."""
    why = cannot_run_here(code)
    if why is not None:
        pytest.skip(why)
    (tmp_path / "models").symlink_to(ROOT / "models")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = [
        p for line in code.splitlines() if (m := re.match(r"^\s*print\(.*\)\s+# (.+)$", line)) and (p := _printed(m[1]))
    ]
    lines = iter(proc.stdout.splitlines())
    missing = [e for e in expected if not any(line.strip() == e for line in lines)]
    assert not missing, f"not printed (in this order): {missing}\nstdout:\n{proc.stdout[-3000:]}"
    assert {p.name for p in tmp_path.iterdir()} <= {"models", "out"}


def test_printed_reads_values_not_prose():
    assert _printed("acc [[2. 2. 2.]]") == "acc [[2. 2. 2.]]"
    assert _printed("['x']: only the model's own inputs") == "['x']"
    assert _printed("{'sum': array([[1., 1., 1.]], dtype=float32)}") == "{'sum': array([[1., 1., 1.]], dtype=float32)}"
    assert _printed("prefill time, per-token decode times") is None
    assert _printed("every finished beam, best first") is None


# -- docs/performance.md ---------------------------------------------------------------------------
def test_performance_doc_is_generated_from_the_results():
    """(How the script composes the doc: tests/benchmarks/test_performance_doc.py.)"""
    assert perfdoc.render() == perfdoc.DOC.read_text(encoding="utf-8"), (
        "docs/performance.md is out of date: run python scripts/make_performance_doc.py"
    )

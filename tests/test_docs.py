"""The README and docs/: links resolve, Python samples run and print what they say, the README's
command synopsis matches the CLI, and docs/performance.md is what benchmarks/results give."""

import argparse
import ast
import io
import json
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
    "ortstate.pool.",  # the KV pool's run inputs (passes/kv_pool.py, passes/last_logits.py)
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
    assert perfdoc.render() == perfdoc.DOC.read_text(encoding="utf-8"), (
        "docs/performance.md is out of date: run python scripts/make_performance_doc.py"
    )


def _results(folder: Path, name: str, data: dict, md: str | None) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
    if md is not None:
        (folder / f"{name}.md").write_text(md, encoding="utf-8")


def test_performance_doc_orders_runs_shifts_headings_and_rebases_links(tmp_path):
    results, doc = tmp_path / "bench" / "results", tmp_path / "docs" / "performance.md"
    results.parent.mkdir()
    machine = {"cpu": "CPU X", "cores": 2, "onnxruntime": "1.2", "openvino": "2026.1"}
    real = "# Real size\n\nRun 2026-01-02.\n\n### Table\n\n![plot](real.png)\n\n```\n# not a heading\n```\n"
    real_run = {"schema": "ortstate.realsize/1", "started": "2026-01-02", "machine": machine}
    _results(results, "realsize-a", real_run, real)
    suite = "# Suite\n\nRun 2026-01-01 ([more](../README.md#x), [web](https://example.com)).\n\n#### Deep\n"
    _results(results, "latest", {"schema": "ortstate.bench-suite/1", "started": "2026-01-01", "machine": {}}, suite)
    _results(results, "other", {"schema": "someone-else/1"}, None)  # not ours: ignored
    text = perfdoc.render(results, doc)
    assert text.startswith(perfdoc.HEADER)
    runs = text.split("## Runs\n\n")[1].split("\n\n")[0].splitlines()
    assert runs[2:] == [
        "| [Suite](#suite) | [`latest.json`](../bench/results/latest.json) | 2026-01-01 | — | — |",
        "| [Real size](#real-size) | [`realsize-a.json`](../bench/results/realsize-a.json) | 2026-01-02 "
        "| CPU X, 2 cores | onnxruntime 1.2, OpenVINO 2026.1 |",
    ]
    assert text.index("## Suite") < text.index("## Real size")
    assert "### Deep\n" in text and "### Table\n" in text and "\n# not a heading\n" in text
    assert "![plot](../bench/results/real.png)" in text
    assert "([more](../bench/README.md#x), [web](https://example.com))" in text


@pytest.mark.parametrize(
    ("md", "message"),
    [
        (
            "# Suite\n\nRun 2025-12-31.\n",
            "latest.md: not rendered from latest.json (its run 2026-01-01 is not named in it)",
        ),
        ("Run 2026-01-01, no title\n", "latest.md: no '# ' title line (not a benchmark's rendering)"),
    ],
)
def test_performance_doc_refuses_results_that_disagree(tmp_path, capsys, md, message):
    _results(tmp_path, "latest", {"schema": "ortstate.bench-suite/1", "started": "2026-01-01"}, md)
    with pytest.raises(perfdoc.DocError) as info:
        perfdoc.render(tmp_path, tmp_path / "performance.md")
    assert str(info.value) == f"{tmp_path}/{message}"
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(tmp_path / "p.md")]) == 2
    assert capsys.readouterr().err == f"make_performance_doc: error: {tmp_path}/{message}\n"
    assert not (tmp_path / "p.md").exists()


def _realsize(folder: Path, name: str, started: str) -> None:
    run = {"schema": "ortstate.realsize/1", "started": started, "machine": {}}
    _results(folder, name, run, f"# Real-size benchmark: {name}\n\nRun {started}.\n")


def test_performance_doc_shows_a_baseline_until_its_own_run_is_there(tmp_path):
    """realsize-before.json is the real-size section until realsize.json arrives; then it is
    only listed, and whatever else is missing (here the bench suite) leaves no gap."""
    results, doc = tmp_path / "results", tmp_path / "docs" / "performance.md"
    _realsize(results, "realsize-before", "2026-01-01")
    text = perfdoc.render(results, doc)
    assert "## Real-size benchmark: realsize-before\n\nRun 2026-01-01." in text
    assert "not shown" not in text

    _realsize(results, "realsize", "2026-02-02")
    text = perfdoc.render(results, doc)
    assert "## Real-size benchmark: realsize\n\nRun 2026-02-02." in text
    assert "realsize-before\n" not in text and "2026-01-01" not in text
    assert (
        "Results files not shown here:\n\n"
        "- [`realsize-before.json`](../results/realsize-before.json): the baseline of `realsize.json`, shown instead\n"
    ) in text


def test_performance_doc_lists_a_run_without_its_rendering_and_warns(tmp_path, capsys):
    results, out = tmp_path / "results", tmp_path / "docs" / "performance.md"
    _realsize(results, "realsize", "2026-02-02")
    _results(results, "latest", {"schema": "ortstate.bench-suite/1", "started": "2026-01-01"}, None)
    assert perfdoc.main(["--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "- [`latest.json`](../results/latest.json): not rendered: no `latest.md` beside it\n" in text
    assert "## Real-size benchmark: realsize\n" in text
    assert capsys.readouterr().err.splitlines() == [
        f"make_performance_doc: warning: {results}/latest.json: not rendered: no latest.md beside it "
        "(rerun the benchmark)",
        f"wrote {out}",
    ]


def test_performance_doc_without_results(tmp_path):
    (tmp_path / "results").mkdir()
    text = perfdoc.render(tmp_path / "results", tmp_path / "docs" / "performance.md")
    assert text == perfdoc.HEADER + "\n## Runs\n\nNo benchmark results rendered from `../results` yet.\n"
    with pytest.raises(perfdoc.DocError, match="nowhere: no such results folder"):
        perfdoc.render(tmp_path / "nowhere", tmp_path / "docs" / "performance.md")


def test_performance_doc_check_mode(tmp_path, capsys):
    _results(tmp_path, "latest", {"schema": "ortstate.bench-suite/1", "started": "s1"}, "# Suite\n\nRun s1.\n")
    out = tmp_path / "docs" / "performance.md"
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(out), "--check"]) == 1
    assert not out.exists()
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(out)]) == 0
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(out), "--check"]) == 0
    out.write_text(out.read_text() + "typed by hand\n")
    assert perfdoc.main(["--results", str(tmp_path), "--out", str(out), "--check"]) == 1
    assert "is out of date: run python scripts/make_performance_doc.py" in capsys.readouterr().err

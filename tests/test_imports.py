"""The package's import structure: data flows ir -> convert -> passes -> runtime -> generate/timing/
verify -> cli, with ``decoders`` (what an optimum-intel decoder takes, read from its IR and folder)
on ir beside the converter, under everything that feeds or exports a decoder. Each part imports
only what its place allows (``ALLOWED``; ``NARROWER`` for modules held to less), with no import
cycles (module level or late) and no module taking another's private names. Read statically from
the source, so a late import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import ortstate

PACKAGE = Path(ortstate.__file__).resolve().parent
BASE = {
    "errors",
    "version",
    "meta",
    "protosize",
    "output_files",
    "model_path",
    "extras",
    "progress",
}  # errors, version, the state format (meta/), writing, where a model file is, the optional extras, progress
# What each top-level part of the package may import besides itself. Passes (ONNX -> ONNX rewrites)
# know only the format, so the converter (explicit_state=True) and the runtime (form="auto") both
# apply them; the runtime knows nothing of IR files or the converter (the package root composes
# the .xml loader).
ALLOWED = {
    **{part: BASE for part in BASE},
    "ir": BASE,
    "passes": BASE,
    "convert": BASE | {"ir", "passes"},
    "runtime": BASE | {"passes"},
    # What an optimum-intel decoder takes (folder, config, feeding rules, graph roles): generate,
    # timing, verify and export read decoders through it, and none of them reads another for it.
    "decoders": BASE | {"ir"},
    # what runs each tick, decided from bookkeeping alone (pure: see test_the_scheduler_is_pure)
    "scheduler": BASE,
    # generation of many requests at once runs on the KV stream pool (ContinuousBatcher)
    "generate": BASE | {"ir", "convert", "runtime", "decoders", "streams", "scheduler"},
    # many streams batched into one run, the runtime side only (pool, slots, loop, kv_*): the graph
    # rewrites that make a model batchable are passes (passes/batchable), which never import streams;
    # an LLM's streams are batched by what its inputs are (decoders)
    "streams": BASE | {"passes", "runtime", "decoders", "scheduler"},
    # timing (``ortstate bench``) compares with OpenVINO in verify's exact config (verify.reference.OV_CONFIG)
    "timing": BASE | {"ir", "convert", "runtime", "decoders", "streams", "scheduler", "generate", "verify"},
    "verify": BASE | {"ir", "convert", "runtime", "decoders"},
    "export": BASE | {"ir", "convert", "passes", "decoders"},  # an LLM folder for other tools
    # streams over the network, and an LLM's generations (OpenAI's API): at the command line's level
    "serve": BASE | {"runtime", "streams", "scheduler", "generate"},
    "cli": BASE
    | {
        "ir",
        "convert",
        "passes",
        "runtime",
        "decoders",
        "generate",
        "timing",
        "verify",
        "export",
        "streams",
        "scheduler",
        "serve",
    },
}

# Modules held to less than their part's place (a name covers the module or package and what is
# under it): verify's inputs and OpenVINO's side sit under the run (no converter, no runtime), and
# timing takes from verify OpenVINO's exact config alone.
NARROWER = {
    "verify.inputs": BASE | {"ir", "decoders"},
    "verify.reference": BASE | {"ir", "verify.inputs"},
    "timing": BASE | {"ir", "convert", "runtime", "decoders", "streams", "generate", "verify.reference"},
}


def _modules() -> dict[str, Path]:
    """``{dotted name: file}`` for every module of the package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """``(module imported, names taken from it, line)`` for each ortstate import in the module,
    anywhere in it except under ``if TYPE_CHECKING:``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] == "ortstate":
                for alias in node.names:  # `from .pkg import module` imports the module
                    sub = f"{base}.{alias.name}"
                    if sub in MODULES:
                        found.append((sub, [], node.lineno))
                    else:
                        found.append((base, [alias.name], node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((a.name, [], node.lineno) for a in node.names if a.name.split(".")[0] == "ortstate")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def _part(module: str) -> str:
    """The top-level part of the package a module belongs to ("" for the package root and ``__main__``)."""
    parts = module.split(".")
    return "" if len(parts) == 1 or parts[1] == "__main__" else parts[1]


def test_every_part_of_the_package_has_a_place_in_the_data_flow() -> None:
    assert sorted({_part(m) for m in MODULES} - set(ALLOWED) - {""}) == []


def test_no_import_goes_against_the_data_flow() -> None:
    wrong = [
        f"{name} (line {line}) imports {target}"
        for name, path in MODULES.items()
        if _part(name)
        for target, _, line in _imports(name, path)
        if _part(target) not in {_part(name), *ALLOWED[_part(name)]}
    ]
    assert wrong == []


def _under(module: str, place: str) -> bool:
    """Whether ``ortstate.<place>`` is the module or a package above it."""
    return module == f"ortstate.{place}" or module.startswith(f"ortstate.{place}.")


def test_narrower_modules_import_only_their_place() -> None:
    wrong = [
        f"{name} (line {line}) imports {target}"
        for name, path in MODULES.items()
        for place, allowed in NARROWER.items()
        if _under(name, place)
        for target, _, line in _imports(name, path)
        if not any(_under(target, other) for other in {place, *allowed})
    ]
    assert wrong == []


def test_the_scheduler_is_pure() -> None:
    """The scheduler decides from bookkeeping alone: it imports no numpy, no ONNX Runtime, nothing of
    ortstate but the errors (so no pool, no model), at its top or anywhere in it."""
    wrong = []
    for name, path in MODULES.items():
        if not _under(name, "scheduler"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if not node.level else []
            else:
                continue
            wrong += [f"{name} (line {node.lineno}): {n}" for n in names if n.split(".")[0] in ("numpy", "onnxruntime")]
        wrong += [
            f"{name} (line {line}): {t}"
            for t, _, line in _imports(name, path)
            if not _under(t, "scheduler") and t != "ortstate.errors"
        ]
    assert wrong == []


# ``ortstate serve``'s two servers, each a package of serve/; what both use sits beside them.
SERVERS = ("serve.streams", "serve.openai")


def test_the_two_servers_share_only_what_sits_beside_them() -> None:
    """Neither server imports the other, and serve's shared modules import neither (but its
    ``__init__``, which names the public API of both)."""
    wrong = []
    for name, path in MODULES.items():
        if not _under(name, "serve") or name == "ortstate.serve":
            continue
        own = next((s for s in SERVERS if _under(name, s)), None)
        wrong += [
            f"{name} (line {line}) imports {target}"
            for target, _, line in _imports(name, path)
            if any(_under(target, other) for other in SERVERS if other != own)
        ]
    assert wrong == []
    assert all(f"ortstate.{server}" in MODULES for server in SERVERS)


def test_no_module_takes_another_modules_private_names() -> None:
    wrong = [
        f"{name} (line {line}) takes {', '.join(taken)} from {target}"
        for name, path in MODULES.items()
        for target, names, line in _imports(name, path)
        if (taken := [n for n in names if n.startswith("_") and not n.endswith("__")]) and target != name
    ]
    assert wrong == []


def _exported(tree: ast.Module) -> tuple[list[str], set[str]]:
    """A module's ``__all__`` and the names it defines itself (functions, classes, assignments)."""
    listed: list[str] = []
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            defined.update(n.id for n in names if isinstance(n, ast.Name))
            if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(node, ast.Assign):
                listed = list(ast.literal_eval(node.value))
    return listed, defined


def test_a_name_is_exported_by_its_module_and_at_most_a_package():
    """Re-exports once: a module's ``__all__`` lists only what it defines; only a package's
    ``__init__`` exports names of its modules (so no name goes through three lists)."""
    wrong = []
    for name, path in MODULES.items():
        if path.name == "__init__.py":
            continue
        listed, defined = _exported(ast.parse(path.read_text()))
        wrong += [f"{name}: {n}" for n in listed if n not in defined]
    assert wrong == []


def test_no_import_cycles() -> None:
    """Between modules (a package's ``__init__`` counts as importing what it re-exports)."""
    graph = {
        name: {t for t, _, _ in _imports(name, path) if t in MODULES and t != name} for name, path in MODULES.items()
    }
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert [" -> ".join(c) for c in cycles] == []


def _own_names(tree: ast.Module) -> set[str]:
    """Every name a module defines or assigns itself (functions, classes, attributes it sets, slots)."""
    own = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            own.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            own.add(n.id)
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            own.add(n.target.id)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            own.add(n.value)  # __slots__ entries, object.__setattr__(self, "_name", ...)
    return own


def test_only_the_ort_adapter_reads_private_attributes_it_does_not_define() -> None:
    """A module's ``x._name`` reads only names it defines itself; reaching into onnxruntime's or
    onnxruntime-extensions' internals is ``runtime/ort_adapter.py``'s job alone."""
    wrong = []
    for name, path in MODULES.items():
        if name == "ortstate.runtime.ort_adapter":
            continue
        tree = ast.parse(path.read_text())
        own = _own_names(tree)
        wrong += [
            f"{name} (line {n.lineno}): {ast.unparse(n)}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute)
            and n.attr.startswith("_")
            and not n.attr.endswith("__")
            and n.attr not in own
        ]
    assert wrong == []


# -- benchmarks/: on top of the package, held to its public names -----------------------------------

BENCHMARKS = PACKAGE.parent / "benchmarks"
# what runs before (or without) ortstate: the entry point, the results' writer, the real-size IR
# builder (in a venv holding optimum-intel), the converter of older results
STDLIB_ONLY = {"__init__", "__main__", "common", "realsize_build", "upgrade_results"}


def _static_all(path: Path) -> set[str] | None:
    """A module's ``__all__`` as written (None where it has none)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}  # type: ignore[attr-defined]
    return None


def _ortstate_imports(tree: ast.Module) -> list[tuple[str, list[str], int]]:
    """``(module, names taken, line)`` for each import of ortstate in a benchmark module, anywhere in it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ortstate":
            found.append((node.module or "", [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name.split(".")[0] == "ortstate"]
    return found


BENCHMARK_TREES = {path.stem: ast.parse(path.read_text()) for path in sorted(BENCHMARKS.glob("*.py"))}


def test_the_package_never_imports_the_benchmarks() -> None:
    wrong = [
        f"{name} (line {node.lineno})"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "benchmarks")
        or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "benchmarks" for a in node.names))
    ]
    assert wrong == []


def test_benchmarks_take_only_public_names_from_ortstate() -> None:
    """No private module or name, and from a module with an ``__all__`` only what it lists (or its
    submodules): a benchmark measures what a user of ortstate gets."""
    wrong = []
    for stem, tree in BENCHMARK_TREES.items():
        for module, names, line in _ortstate_imports(tree):
            path = MODULES.get(module)
            if path is None or any(part.startswith("_") for part in module.split(".")):
                wrong.append(f"benchmarks/{stem}.py (line {line}): module {module}")
                continue
            public = _static_all(path)
            for taken in names:
                private = taken.startswith("_") and not taken.endswith("__")
                listed = public is None or taken in public or f"{module}.{taken}" in MODULES
                if private or not listed:
                    wrong.append(f"benchmarks/{stem}.py (line {line}): {taken} from {module}")
    assert wrong == []


def _patched(tree: ast.Module) -> list[str]:
    """Assignments to, deletions of and setattr on what a module imported from ortstate."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ortstate":
            bound |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            bound |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "ortstate"}

    def root(node: ast.AST) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        found += [
            f"line {node.lineno}: {ast.unparse(t)}"
            for t in targets
            if isinstance(t, (ast.Attribute, ast.Subscript)) and root(t) in bound
        ]
    return found


def test_benchmarks_patch_nothing_of_ortstate() -> None:
    """Suites set ortstate up through its public options (ORTSTATE_* settings, session options,
    arguments), never by assigning to its modules' or classes' attributes."""
    wrong = [f"benchmarks/{stem}.py {patch}" for stem, tree in BENCHMARK_TREES.items() for patch in _patched(tree)]
    assert wrong == []


def test_a_patch_of_an_ortstate_module_is_caught() -> None:
    """The check above, on what realsize_grouped.py did before the setting existed."""
    source = "import ortstate.runtime.loaded as loaded\nloaded.group_decode = lambda *args: 0\n"
    assert _patched(ast.parse(source)) == ["line 2: loaded.group_decode"]
    assert _patched(ast.parse("from ortstate import timing\nsetattr(timing, 'x', 1)\n")) == ["line 2: timing.?"]


def test_benchmarks_read_no_private_attributes_they_do_not_define() -> None:
    wrong = [
        f"benchmarks/{stem}.py (line {n.lineno}): {ast.unparse(n)}"
        for stem, tree in BENCHMARK_TREES.items()
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr.startswith("_")
        and not n.attr.endswith("__")
        and n.attr not in _own_names(tree)
    ]
    assert wrong == []


def test_the_benchmarks_entry_point_imports_only_the_standard_library() -> None:
    """At their top (a suite's modules are imported once it is chosen), so ``python -m benchmarks``
    and ``real-size-build`` run in a Python without ortstate or onnxruntime."""
    wrong = []
    for stem in sorted(STDLIB_ONLY):
        for node in BENCHMARK_TREES[stem].body:
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            wrong += [
                f"benchmarks/{stem}.py (line {node.lineno}): {name}"
                for name in names
                if name.split(".")[0] not in sys.stdlib_module_names | {"__future__", "benchmarks"}
            ]
    assert wrong == []

"""The package's import structure: data flows ir -> convert -> passes -> runtime -> generate/timing/
verify -> cli, with ``decoders`` (what an optimum-intel decoder takes, read from its IR and folder)
on ir beside the converter, under everything that feeds or exports a decoder. Each part imports
only what its place allows (``ALLOWED``; ``NARROWER`` for modules held to less), with no import
cycles (module level or late) and no module taking another's private names. Read statically from
the source, so a late import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
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
    # generation of many requests at once runs on the KV stream pool (ContinuousBatcher)
    "generate": BASE | {"ir", "convert", "runtime", "decoders", "streams"},
    # many streams batched into one run, the runtime side only (pool, slots, loop, kv_*): the graph
    # rewrites that make a model batchable are passes (passes/batchable), which never import streams;
    # an LLM's streams are batched by what its inputs are (decoders)
    "streams": BASE | {"passes", "runtime", "decoders"},
    # timing (``ortstate bench``) compares with OpenVINO in verify's exact config (verify.reference.OV_CONFIG)
    "timing": BASE | {"ir", "convert", "runtime", "decoders", "streams", "generate", "verify"},
    "verify": BASE | {"ir", "convert", "runtime", "decoders"},
    "export": BASE | {"ir", "convert", "passes", "decoders"},  # an LLM folder for other tools
    # streams over the network, and an LLM's generations (OpenAI's API): at the command line's level
    "serve": BASE | {"runtime", "streams", "generate"},
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


def test_no_module_takes_another_modules_private_names() -> None:
    wrong = [
        f"{name} (line {line}) takes {', '.join(taken)} from {target}"
        for name, path in MODULES.items()
        for target, names, line in _imports(name, path)
        if (taken := [n for n in names if n.startswith("_") and not n.endswith("__")]) and target != name
    ]
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

"""Convert results written before the one results document (``benchmarks/common.py``) into it, in place.

    python -m benchmarks.upgrade_results [FOLDER]     # default benchmarks/results

Each suite used to write a shape of its own: ``schema`` and ``started`` in some, a machine mixing
the CPU with the versions (``isa`` a string, or ``cpu_flags`` a list, or neither), the load average
as ``load``, ``loadavg_start``/``loadavg_end``, ``load_before``/``load_after`` or
``loadavg_1_5_15``, ortstate's source as a string (``0.1.0 (main 4552e62, modified)``), and one
(``streams.json``) no machine at all. This moves what each recorded into the envelope's fields
and everything else, unchanged, under ``data``; a fact a run did not record is null (it is never
guessed). The real-size runs' load before and after are their first and last precision's, which
stay in ``data`` too. A ``.md`` twin without a ``# `` title gets one (its first ``###`` heading, or
the suite's title), its body untouched: the figures rendered then are the figures shown now.

Every value of an old document is checked to be in its new one (a string split into fields, such
as the source, by its parts) before anything is written; files already in the new shape are left
alone, so running it again changes nothing.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, SCHEMA

SUITE_OF_SCHEMA = {
    "ortstate.bench-suite/1": "per-step",
    "ortstate.realsize/1": "real-size",
    "ortstate.realsize-context/1": "real-size-context",
    "ortstate.realsize-profile/1": "real-size-profile",
    "ortstate.llm-streams/1": "llm-streams",
    "ortstate.llm-streams-profile/1": "llm-streams-profile",
    "ortstate.openai-serve/1": "openai-serve",
}
SUITE_OF_NAME = {"serve": "serve", "serve-durable": "serve-durable", "streams": "streams"}
# the keys an old document held that the envelope now holds
ENVELOPE = {"schema", "started", "seconds", "machine", "versions", "ortstate", "load", "loadavg_start", "loadavg_end"}
ENVELOPE |= {"load_before", "load_after", "loadavg_1_5_15"}
DISTS = ("python", "numpy", "onnx", "onnxruntime", "onnxruntime-extensions", "openvino", "openvino-genai")
_SOURCE = re.compile(r"^(?P<version>\S+)(?: \((?P<branch>\S+) (?P<commit>[0-9a-f]{7,40})(?P<dirty>, modified)?\))?$")
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s/]+\.png)\)")
_TITLES = {"streams": "# Many streams: a StreamPool against one request per stream"}


def suite_of(name: str, old: dict[str, Any]) -> str:
    """The suite an old document came from, by its schema or its file's name."""
    if old.get("schema") in SUITE_OF_SCHEMA:
        return SUITE_OF_SCHEMA[old["schema"]]
    if name.startswith("realsize-grouped-"):
        return "grouped"
    if name in SUITE_OF_NAME:
        return SUITE_OF_NAME[name]
    raise ValueError(f"{name}.json: not a results file this converter knows (schema {old.get('schema')!r})")


def _source(old: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """ortstate's version and source, from the strings the suites wrote."""
    texts = [
        old.get("ortstate"),
        (old.get("versions") or {}).get("ortstate"),
        (old.get("machine") or {}).get("ortstate"),
    ]
    found = [m for text in texts if isinstance(text, str) and (m := _SOURCE.match(text))]
    version = found[0]["version"] if found else None
    with_source = next((m for m in found if m["commit"]), None)
    if with_source is None:
        return version, {"commit": None, "branch": None, "dirty": None}
    source = {"commit": with_source["commit"], "branch": with_source["branch"], "dirty": bool(with_source["dirty"])}
    return version, source


def _machine(old: dict[str, Any]) -> dict[str, Any]:
    m = old.get("machine") or {}
    flags = set(m.get("cpu_flags") or []) | set((m.get("isa") or "").split())
    recorded = "cpu_flags" in m or "isa" in m
    return {"cpu": m.get("cpu"), "cpu_flags": sorted(flags) if recorded else None, "cores": m.get("cores")}


def _versions(old: dict[str, Any], ortstate: str | None) -> dict[str, Any]:
    given = (old.get("machine") or {}) | (old.get("versions") or {})
    found = {d: given.get(d) if given.get(d) != "missing" else None for d in DISTS}
    return found | {"ortstate": ortstate}


def _load(old: dict[str, Any], suite: str) -> dict[str, Any]:
    """The load average before and after, as the old document recorded them (a list of 1, 5 and 15
    minute values, or the 1-minute value alone where that was all it kept)."""
    if suite == "per-step":
        before, after = old["load"]
        return {"before": [before], "after": [after]}
    if "loadavg_start" in old:
        return {"before": old["loadavg_start"], "after": old.get("loadavg_end")}
    if "load_before" in old:
        return {"before": old["load_before"], "after": old.get("load_after")}
    spans = [old["loadavg_1_5_15"]] if "loadavg_1_5_15" in old else []
    spans += [e["loadavg_1_5_15"] for e in old.get("precisions", []) if e.get("loadavg_1_5_15")]
    if spans:
        return {"before": spans[0][0], "after": spans[-1][-1]}
    ones = [e["loadavg"] for e in old.get("precisions", []) if e.get("loadavg")]  # the 1-minute value alone
    return {"before": [ones[0][0]], "after": [ones[-1][-1]]} if ones else {"before": None, "after": None}


def _grouped_facts(name: str, markdown: str) -> dict[str, Any]:
    """What the grouped runs' markdown says and their JSON did not keep."""
    heads = re.search(r"(\d+) query heads over (\d+) KV heads", markdown)
    threads = re.search(r", (\d+) threads;", markdown)
    if not heads or not threads:
        raise ValueError(f"{name}.md: not the grouped benchmark's rendering")
    first = name.removeprefix("realsize-grouped-").removesuffix("-first")
    return {"model": "int4", "heads": int(heads[1]), "kv_heads": int(heads[2]), "threads": int(threads[1])} | {
        "first": first,
        "grouped": None,  # the pass's thresholds of that day, not a recorded setting
    }


def upgrade(name: str, old: dict[str, Any], markdown: str, images: list[str]) -> tuple[dict[str, Any], str]:
    """The results document and the markdown twin of the old document ``old`` (``NAME.json``)."""
    suite = suite_of(name, old)
    version, source = _source(old)
    data = {k: v for k, v in old.items() if k not in ENVELOPE}
    if suite == "grouped":
        data = _grouped_facts(name, markdown) | data
    started = old.get("started")
    if started is None and (day := re.search(r"; (\d{4}-\d{2}-\d{2})\.$", markdown, re.M)):
        started = day[1]  # the serve suites wrote the day into the markdown alone
    doc = {
        "schema": SCHEMA,
        "suite": suite,
        "name": name,
        "started": started,
        "seconds": old.get("seconds"),
        "machine": _machine(old),
        "load": _load(old, suite),
        "versions": _versions(old, version),
        "source": source,
        "images": images,
        "data": data,
    }
    return doc, _titled(name, suite, markdown)


def _titled(name: str, suite: str, markdown: str) -> str:
    if suite in _TITLES:
        return f"{_TITLES[suite]}\n\n{markdown}"
    if markdown.startswith("# "):
        title, _, rest = markdown.partition("\n")
        plain = suite == "real-size-profile" and title == "# Where ortstate's decode time goes (real-size model)"
        return f"{title}: {name}\n{rest}" if plain else markdown  # two such runs: one title each
    if markdown.startswith("### "):
        title, _, rest = markdown[4:].partition("\n")
        if suite == "grouped":  # two such runs: one title each
            title += f": the {name.removeprefix('realsize-grouped-').removesuffix('-first')} session made first"
        return f"# {title}\n{rest}"
    raise ValueError(f"{name}.md: no title, and none known for the {suite} suite")


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def lost(old: dict[str, Any], new: dict[str, Any]) -> list[Any]:
    """The values of ``old`` that ``new`` does not hold (a string by its parts: a source's version,
    branch and commit, a flag string's flags); "missing" versions are null now, and the old schema
    is the new one's ``suite``."""
    kept = {json.dumps(leaf) for leaf in _leaves(new)}
    out = []
    for leaf in _leaves({k: v for k, v in old.items() if k != "schema"}):
        if json.dumps(leaf) in kept or leaf == "missing":
            continue
        parts = [p for p in re.split(r"[\s(),]+", leaf) if p and p != "modified"] if isinstance(leaf, str) else [leaf]
        if not parts or any(json.dumps(p) not in kept for p in parts):
            out.append(leaf)
    return out


def upgrade_folder(folder: Path) -> list[str]:
    """Every old results file in ``folder`` in the new shape; the names converted.

    Raises:
        ValueError: a file this converter does not know, or a value a conversion would lose.
    """
    done = []
    for path in sorted(folder.glob("*.json")):
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("schema") == SCHEMA:
            continue
        twin = path.with_suffix(".md")
        markdown = twin.read_text(encoding="utf-8") if twin.is_file() else ""
        images = [i for i in dict.fromkeys(_IMAGE.findall(markdown)) if (folder / i).is_file()]
        if path.stem == "streams":  # its plots, written by the same run, were not linked from its markdown
            images = sorted(p.name for p in folder.glob("streams_h*.png"))
        new, titled = upgrade(path.stem, old, markdown, images)
        missing = lost(old, new)
        if missing:
            raise ValueError(f"{path}: the conversion would lose {missing[:5]}")
        path.write_text(json.dumps(new, indent=1) + "\n", encoding="utf-8")
        if twin.is_file() and titled != markdown:
            twin.write_text(titled, encoding="utf-8")
        done.append(path.stem)
    return done


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    folder = Path(args[0]) if args else RESULTS
    try:
        done = upgrade_folder(folder)
    except (OSError, ValueError) as exc:
        print(f"upgrade_results: error: {exc}", file=sys.stderr)
        return 2
    print(f"upgrade_results: {len(done)} converted: {', '.join(done) or 'none'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

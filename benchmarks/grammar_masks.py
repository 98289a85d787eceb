"""How long a grammar engine takes to mask one decode step of a batch, on a real-size vocabulary.

    python -m benchmarks grammar-masks [--tokenizer FILE] [--engines llguidance,xgrammar,outlines-core]
        [--rows 1,32] [--threads 1,2] [--rounds 3] [--items 12] [--out DIR]

Each row of a batch writes its own valid JSON document (a made-up order: id, name, status enum,
score, tags, an address with a 5-digit pattern, ``--items`` line items; ~300 tokens at 12 items),
tokenized by the tokenizer; at each tick every row still writing gets its mask (the engine fills the
batch's bitmask: ``fill``), the mask is applied to a ``[rows, vocab]`` logits array (numpy, the same
code for every engine: ``apply``), every document token is checked to be allowed (``rejected``
counts those that were not: 0 for an engine that constrains the same language), and each matcher
advances by its row's token (``advance``). Schemas: ``object`` (that order's schema) and
``json_object`` (``{"type": "object"}``: any JSON object, what OpenAI's json mode asks; the same
documents). ``ortstate`` is the product's own path (``ortstate.generate.structured``: llguidance,
its mask written into the logits and advanced, each row keeping its closing plan, as generation
calls it).

The vocabulary: ``--tokenizer FILE`` (a ``tokenizer.json``), else the real-size byte-level BPE
:mod:`benchmarks.grammar_vocab` builds (151,936 ids; kept under ``--vocab-cache``). Rounds alternate
the engines' order (forward, then backward) so drift falls on all alike; figures are medians and
99th percentiles over every tick of every round. Engines not installed are listed as missing
(xgrammar's import needs torch: see docs/structured-output.md for the venv this was measured in).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, conditions, start_run, write_results
from benchmarks.grammar_engines import ENGINES, available, make_engine
from benchmarks.grammar_vocab import SYLLABLES, cached

ITEM = {
    "type": "object",
    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}, "price": {"type": "number"}},
    "required": ["sku", "qty", "price"],
    "additionalProperties": False,
}
ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
    },
    "required": ["street", "city", "zip"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "status": {"enum": ["active", "inactive", "pending"]},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": ADDRESS,
        "items": {"type": "array", "items": ITEM},
    },
    "required": ["id", "name", "status", "score", "tags", "address", "items"],
    "additionalProperties": False,
}
SCHEMAS = {"object": ORDER, "json_object": {"type": "object"}}


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(n))


def _price(rng: random.Random) -> float:
    return round(rng.uniform(1, 500), 2)


def document(seed: int, items: int) -> str:
    """A valid ``ORDER`` as json.dumps writes it (the engines' compact JSON)."""
    rng = random.Random(seed)
    order = {
        "id": rng.randint(1, 10**6),
        "name": _words(rng, 3).title(),
        "status": rng.choice(["active", "inactive", "pending"]),
        "score": round(rng.uniform(0, 100), 2),
        "tags": [_words(rng, 1) for _ in range(rng.randint(1, 4))],
        "address": {"street": _words(rng, 3), "city": _words(rng, 1).title(), "zip": f"{rng.randint(0, 99999):05d}"},
        "items": [
            {
                "sku": f"{_words(rng, 1)}-{rng.randint(100, 999)}",
                "qty": rng.randint(1, 9),
                "price": round(rng.uniform(1, 500), 2),
            }
            for _ in range(items)
        ],
    }
    return json.dumps(order)


def _ids(tokenizer: Any, vocab: Any, data: bytes) -> list[int]:
    """The tokenizer's ids for ``data`` where they spell it, else the longest tokens that do (as ortstate's)."""
    try:
        ids = tokenizer.encode(data.decode("utf-8"), add_special_tokens=False).ids
    except UnicodeDecodeError:
        ids = []
    return ids if b"".join(vocab.tokens[i] for i in ids) == data else vocab.spell(data)


BUDGET = 4096


class _Product:
    """ortstate's own path, as an engine: its masks go straight into the logits, its rows keep a
    closing plan (a ``max_new_tokens`` of :data:`BUDGET`)."""

    name = "ortstate"

    def __init__(self, tokenizer_path: Path, width: int) -> None:
        import tokenizers

        from ortstate.generate import Tokenizer
        from ortstate.generate.structured import advance, grammars_for, mask_logits

        self.grammars = grammars_for(Tokenizer(tokenizers.Tokenizer.from_file(str(tokenizer_path))), width)
        self.mask, self.move = mask_logits, advance

    def compile(self, schema: str) -> str:
        self.grammars.compile(schema)
        return schema

    def matchers(self, schema: str, n: int) -> list[Any]:
        # a budget past every document: each row keeps its closing plan, as generation does
        return [self.grammars.matcher(schema, budget=BUDGET) for _ in range(n)]


def run_batch(engine: Any, compiled: Any, docs: list[list[int]], width: int) -> dict[str, list[float]]:
    """One batch through its documents: per tick, ms to fill / apply / advance, live rows, rejections."""
    matchers = engine.matchers(compiled, len(docs))
    logits = np.zeros((len(docs), width), np.float32)
    bits = np.zeros((len(docs), (width + 1 + 31) // 32), np.int32)
    out: dict[str, list[float]] = {"fill": [], "apply": [], "advance": [], "live": [], "rejected": []}
    for step in range(max(map(len, docs))):
        live = [r for r, d in enumerate(docs) if step < len(d)]
        rows = [matchers[r] for r in live]
        tokens = [docs[r][step] for r in live]
        view = logits[: len(live)]
        view.fill(0.0)
        t0 = time.perf_counter()
        if isinstance(engine, _Product):
            engine.mask(view, rows)
            t1 = t2 = time.perf_counter()
        else:
            engine.fill(rows, bits[: len(live)])
            t1 = time.perf_counter()
            allowed = np.unpackbits(bits[: len(live)].view(np.uint8), axis=1, count=width, bitorder="little")
            np.copyto(view, np.float32(-np.inf), where=~allowed.view(bool))
            t2 = time.perf_counter()
        rejected = int(np.isneginf(view[np.arange(len(live)), tokens]).sum())
        t3 = time.perf_counter()
        (engine.move if isinstance(engine, _Product) else engine.advance)(rows, tokens)
        t4 = time.perf_counter()
        for key, value in (("fill", t1 - t0), ("apply", t2 - t1), ("advance", t4 - t3)):
            out[key].append(value * 1e3)
        out["live"].append(len(live))
        out["rejected"].append(rejected)
    return out


def _summary(ticks: list[dict[str, list[float]]], compile_ms: list[float]) -> dict[str, Any]:
    fill = [f for t in ticks for f in t["fill"]]
    per_row = [f * 1e3 / n for t in ticks for f, n in zip(t["fill"], t["live"])]
    total = [f + a + v for t in ticks for f, a, v in zip(t["fill"], t["apply"], t["advance"])]
    apply = [a for t in ticks for a in t["apply"]]

    def p99(xs: list[float]) -> float:
        return float(np.percentile(xs, 99))

    return {
        "compile_ms": round(statistics.median(compile_ms), 2),
        "ticks": len(fill),
        "fill_ms": round(statistics.median(fill), 3),
        "fill_p99_ms": round(p99(fill), 3),
        "fill_us_per_row": round(statistics.median(per_row), 1),
        "fill_p99_us_per_row": round(p99(per_row), 1),
        "apply_ms": round(statistics.median(apply), 3),
        "advance_ms": round(statistics.median([a for t in ticks for a in t["advance"]]), 3),
        "tick_ms": round(statistics.median(total), 3),
        "tick_p99_ms": round(p99(total), 3),
        "rejected": sum(sum(t["rejected"]) for t in ticks),
    }


def measure(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    """Every engine x schema x rows x threads, ``args.rounds`` rounds in alternating engine order."""
    import tokenizers

    from ortstate.generate.structured import schema_text, token_bytes

    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    width = tokenizer.get_vocab_size()
    vocab = token_bytes(json.loads(path.read_text(encoding="utf-8")), width)
    docs = [_ids(tokenizer, vocab, document(seed, args.items).encode()) for seed in range(max(args.rows))]
    names = [e for e in args.engines if e == "ortstate" or available(e)]
    engines: dict[tuple[str, int], Any] = {}
    setup: dict[str, float] = {}
    for name in names:
        for threads in [1] if name in ("outlines-core", "ortstate") else args.threads:
            t0 = time.perf_counter()
            engines[name, threads] = (
                _Product(path, width)
                if name == "ortstate"
                else make_engine(name, vocab, threads, lambda b: _ids(tokenizer, vocab, b))
            )
            setup[name] = round(time.perf_counter() - t0, 2)
    texts = {s: schema_text(SCHEMAS[s]) for s in args.schemas}
    ticks: dict[tuple, list] = {}
    compiles: dict[tuple, list[float]] = {}
    refused: dict[str, str] = {}
    for round_ in range(args.rounds):
        order = list(engines) if round_ % 2 == 0 else list(reversed(engines))
        for key in order:
            engine = engines[key]
            for schema, text in texts.items():
                if f"{key[0]} {schema}" in refused:
                    continue
                t0 = time.perf_counter()
                try:
                    compiled = engine.compile(text)
                except (NotImplementedError, ValueError, RuntimeError) as exc:
                    refused[f"{key[0]} {schema}"] = " ".join(str(exc).split())[:200]
                    continue
                compile_ms = (time.perf_counter() - t0) * 1e3
                for rows in args.rows:
                    cell = (*key, schema, rows)
                    compiles.setdefault(cell, []).append(compile_ms)
                    ticks.setdefault(cell, []).append(run_batch(engine, compiled, docs[:rows], width))
            print(f"[grammar-masks] round {round_ + 1}/{args.rounds}: {key[0]} ({key[1]} threads) done", flush=True)
    results = [
        {"engine": e, "threads": t, "schema": s, "rows": r, **_summary(ticks[e, t, s, r], compiles[e, t, s, r])}
        for (e, t, s, r) in ticks
    ]
    return {
        "tokenizer": path.name,
        "vocab": width,
        "items": args.items,
        "doc_tokens": [len(d) for d in docs],
        "rounds": args.rounds,
        "engines": {n: engines[next(k for k in engines if k[0] == n)].version for n in names if n != "ortstate"},
        "setup_s": setup,
        "missing": [e for e in args.engines if e not in names],
        "refused": refused,
        "results": sorted(results, key=lambda x: (x["schema"], x["rows"], x["engine"], x["threads"])),
    }


def markdown(doc: dict[str, Any]) -> str:
    d = doc["data"]
    head = (
        "| schema | rows | engine | threads | compile ms | fill ms/tick (p99) | fill µs/row (p99) | apply ms "
        "| advance ms | tick ms (p99) | rejected |"
    )
    lines = [head, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in d["results"]:
        cells = [
            r["schema"],
            r["rows"],
            r["engine"],
            r["threads"],
            f"{r['compile_ms']:.1f}",
            f"{r['fill_ms']:.3f} ({r['fill_p99_ms']:.3f})",
            f"{r['fill_us_per_row']:.1f} ({r['fill_p99_us_per_row']:.1f})",
            f"{r['apply_ms']:.3f}",
            f"{r['advance_ms']:.3f}",
            f"{r['tick_ms']:.3f} ({r['tick_p99_ms']:.3f})",
            r["rejected"],
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    notes = [f"- {k}: not measured ({v})" for k, v in d["refused"].items()]
    notes += [f"- {e}: not installed" for e in d["missing"]]
    versions = ", ".join(f"{k} {v}" for k, v in d["engines"].items())
    return (
        "# Grammar engines: the mask of one decode step\n\n"
        + conditions(doc)
        + f" Vocabulary {d['tokenizer']} ({d['vocab']} ids); {versions}; documents of "
        f"{min(d['doc_tokens'])}-{max(d['doc_tokens'])} tokens ({d['items']} items); {d['rounds']} rounds "
        "alternating the engines' order; medians (99th percentiles) over every tick. `ortstate` is "
        "ortstate.generate.structured (llguidance): its fill column is the whole mask written into the logits. "
        f"Setup (vocabulary read) s: {d['setup_s']}.\n\n" + "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"
    )


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", type=Path, help="a tokenizer.json (default: the real-size one, built once)")
    parser.add_argument(
        "--vocab-cache",
        type=Path,
        default=Path.home() / ".cache" / "ortstate-bench",
        help="where the real-size tokenizer is kept (default ~/.cache/ortstate-bench)",
    )
    parser.add_argument(
        "--engines",
        default=",".join([*ENGINES, "ortstate"]),
        help="comma-separated, of llguidance, xgrammar, outlines-core, ortstate (default all; missing ones are noted)",
    )
    parser.add_argument("--schemas", default=",".join(SCHEMAS), help="comma-separated, of object, json_object")
    parser.add_argument("--rows", type=_ints, default=[1, 32], help="batch sizes, comma-separated (default 1,32)")
    parser.add_argument(
        "--threads", type=_ints, default=[1, 2], help="the engines' thread pools, comma-separated (default 1,2)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the engines' order (default 3)")
    parser.add_argument("--items", type=int, default=12, help="line items per document (default 12: ~300 tokens)")
    parser.add_argument("--name", default="grammar-masks", help="result file stem (default grammar-masks)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    args = parser.parse_args(argv)
    args.engines = args.engines.split(",")
    args.schemas = args.schemas.split(",")
    unknown = [e for e in args.engines if e not in [*ENGINES, "ortstate"]] + [
        s for s in args.schemas if s not in SCHEMAS
    ]
    if unknown:
        parser.error(f"unknown engine or schema: {', '.join(unknown)}")
    path = args.tokenizer or cached(args.vocab_cache)
    run = start_run("grammar-masks")
    data = measure(args, path)
    doc = write_results(args.out, args.name, run, data, markdown)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where ortstate's decode time goes on the real-size model: ONNX Runtime's profiler, by op type and by part.

For each precision: the IR (built by ``realsize_build.py``) is converted in a process of its own (or the
model ``realsize.py --keep-onnx`` left in ``CACHE/onnx/PRECISION/ENGINE/`` is reused), then run with
``enable_profiling`` through ``ortstate.generate.Generator``: one short warm-up generation, then a prefill
of ``--prompt`` tokens and ``--steps`` decode steps. Only the decode runs are counted. ``--context
32,4000`` profiles each context length in a session of its own (the prompt is that many tokens) and adds
a table of how each op type and part grows from the first to the last. Each graph node's kernel time (an
``If``'s as its branch's nodes) is summed by op type (as ONNX Runtime ran it, after its own fusions) and
by the part of the model its name comes from (the converter names nodes after the IR layers
optimum-intel named after the torch modules): the linear layers (attention projections, MLP), attention
itself, the KV cache (the ``Concat`` a variable is written from, the ``Gather`` by ``beam_idx`` it is
read through), RoPE, the norms, the embedding, the LM head. The profile file is written when the
session is dropped (ONNX Runtime does that itself), so only ortstate's public API is used.

Usage::

    flock /tmp/realsize.lock python -m benchmarks real-size-profile int4 fp32 --cache DIR
    flock /tmp/realsize.lock python -m benchmarks real-size-profile int4 --context 32,4000 --steps 16

Writes ``benchmarks/results/realsize-profile.json`` and ``.md`` (``--name``).
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, conditions, start_run, write_results
from benchmarks.realsize_build import DEFAULT_CACHE, DEFAULT_VARIANT, PRECISIONS, VARIANTS, ir_dir, ir_ready, model_dir
from benchmarks.realsize_engines import greedy, parse_engine, prompt_ids
from benchmarks.realsize_runs import progress, run_child

# (part, pattern on the node name), first match wins; KV-cache nodes are found from the graph first
PARTS = (
    ("LM head", r"lm_head"),
    ("embedding", r"embed_tokens"),
    ("attention projections (q/k/v/o)", r"\.(q|k|v|o)_proj\b"),
    ("MLP (gate/up/down, SiLU)", r"\.mlp\b|\.mlp\."),
    ("attention (SDPA: QK, softmax, ·V, mask)", r"scaled_dot_product_attention"),
    ("RoPE", r"rotary_emb|aten::(cos|sin)\b|self_attn/aten::(mul|neg|slice|cat|add)\b"),
    ("attention heads plumbing (GQA expand, reshapes, transposes)", r"self_attn/aten::"),
    ("RMSNorm", r"layernorm|\.norm/"),
    ("residual adds", r"layers\.\d+/aten::add\b"),
    ("variables: init If / Assign Identity (explicit form)", r"^(ReadValue|Assign)_\d+/"),
    ("Gather range guards (converter)", r"^Gather_\d+/"),
    ("causal mask and positions (model level)", r"__module\.model/aten::"),
)
KV_WRITE, KV_READ, OTHER = (
    "KV cache: append (Concat written to the variable)",
    "KV cache: read (Gather by beam_idx)",
    "other",
)


def kv_nodes(onnx_path: Path) -> tuple[set[str], set[str]]:
    """Names of the nodes the variables are written from (Assign's input) and read through (ReadValue's
    consumers), from the custom-op model (its weights are not loaded)."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    producer = {out: n.name for n in graph.node for out in n.output}
    reads = {n.output[0] for n in graph.node if n.op_type == "ReadValue"}
    write = {producer[n.input[0]] for n in graph.node if n.op_type == "Assign" and n.input[0] in producer}
    read = {n.name for n in graph.node if reads.intersection(n.input) and n.op_type != "Assign"}
    return write, read


def part_of(node: str, write: set[str], read: set[str]) -> str:
    """The model part a profiled node belongs to (see :data:`PARTS`)."""
    if node in write:
        return KV_WRITE
    if node in read:
        return KV_READ
    return next((part for part, pattern in PARTS if re.search(pattern, node)), OTHER)


# Nodes whose kernel time includes their subgraphs' nodes, which are profiled one by one too.
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


def summarize(trace: list[dict[str, Any]], first_run: int, write: set[str], read: set[str]) -> dict[str, Any]:
    """ms per decode step by op type and by part, over the ``model_run`` events from ``first_run`` on."""
    runs = sorted(
        (e for e in trace if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"]
    )
    runs = runs[first_run:]
    if not runs:
        return {"runs": 0}
    spans = [(r["ts"], r["ts"] + r["dur"]) for r in runs]
    by_op: dict[str, float] = defaultdict(float)
    by_part: dict[str, float] = defaultdict(float)
    nodes: dict[str, float] = defaultdict(float)
    other: dict[str, float] = defaultdict(float)
    count = 0
    for e in trace:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        if e.get("args", {}).get("op_name") in CONTROL_FLOW:
            continue  # its time is its subgraph's nodes, which the profiler reports themselves
        ts = e["ts"]
        if not any(lo <= ts <= hi for lo, hi in spans):
            continue
        name = e["name"][: -len("_kernel_time")]
        count += 1
        dur = e["dur"] / 1e3  # µs -> ms
        by_op[e.get("args", {}).get("op_name", "?")] += dur
        part = part_of(name, write, read)
        by_part[part] += dur
        nodes[name] += dur
        if part == OTHER:
            other[f"{name} ({e.get('args', {}).get('op_name', '?')})"] += dur
    n = len(runs)
    run_ms = sum(r["dur"] for r in runs) / 1e3 / n
    kernels = sum(by_op.values()) / n

    def table(d: dict[str, float]) -> list[dict[str, Any]]:
        rows = sorted(d.items(), key=lambda kv: -kv[1])
        return [{"name": k, "ms": v / n, "share": v / n / run_ms} for k, v in rows]

    return {
        "runs": n,
        "model_run_ms": run_ms,
        "kernels_ms": kernels,
        "nodes_per_run": count / n,
        "by_op": table(by_op),
        "by_part": table(by_part),
        "top_nodes": table(nodes)[:15],
        "top_other_nodes": table(other)[:15],
    }


def profile(precision: str, a: argparse.Namespace) -> list[dict[str, Any]]:
    """One entry per context length of ``a.context``: the decode profile after a prompt of that length."""
    engine = parse_engine(a.engine)
    ir = ir_dir(a.cache, precision, a.variant)
    onnx_path = model_dir(a.cache, a.variant) / "onnx" / precision / engine.name / "model.onnx"
    entry: dict[str, Any] = {"precision": precision, "variant": a.variant, "engine": engine.to_dict()}
    if onnx_path.is_file() and not a.reconvert:
        progress(f"{precision}: reusing {onnx_path.relative_to(a.cache)}")
    else:
        onnx_path.parent.mkdir(parents=True, exist_ok=True)
        progress(f"{precision}: converting ({engine.convert or 'defaults'})")
        conv = run_child(
            ["convert", "--ir", str(ir), "--onnx", str(onnx_path), "--convert-kwargs", json.dumps(engine.convert)],
            a.timeout,
        )
        if "error" in conv:
            return [entry | {"error": conv["error"]}]
    write, read = kv_nodes(onnx_path)
    kv = {"kv_write_nodes": len(write), "kv_read_nodes": len(read)}
    prompt = prompt_ids(max(a.context), int(json.loads((ir / "config.json").read_text())["vocab_size"]))
    return [
        entry | {"context": c} | kv | _profile_one(onnx_path, ir, engine, prompt[:c], write, read, a) for c in a.context
    ]


def _profile_one(onnx_path: Path, ir: Path, engine: Any, prompt: list[int], write: set, read: set, a: Any) -> dict:
    import onnx

    from ortstate import StatefulSession
    from ortstate.generate import Generator, read_config
    from ortstate.timing import session_options

    with tempfile.TemporaryDirectory(prefix="ortstate-profile-") as tmp:
        options = session_options(a.threads, onnx.load(str(onnx_path), load_external_data=False))
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "decode")
        generator = Generator(StatefulSession(onnx_path, options, form=engine.form), read_config(ir))
        progress(f"warm-up, then prefill {len(prompt)} + {a.steps} decode steps under the profiler")
        greedy(generator, prompt[:32], a.warmup)
        started = time.perf_counter()
        run = greedy(generator, prompt, a.steps)
        wall = time.perf_counter() - started
        del generator
        gc.collect()  # ONNX Runtime writes the profile when the session goes
        files = sorted(Path(tmp).glob("decode*.json"))
        if not files:
            return {"error": "ONNX Runtime wrote no profile"}
        trace = json.loads(files[-1].read_text(encoding="utf-8"))
    summary = summarize(trace, (a.warmup + 1) + 1, write, read)  # skip the warm-up's runs and the prefill
    decode = run["decode_s"]
    return summary | {"step_ms": sum(decode) / len(decode) * 1e3, "prefill_ms": run["prefill_s"] * 1e3, "wall_s": wall}


def growth_table(first: dict[str, Any], last: dict[str, Any], key: str, label: str, top: int = 12) -> str:
    """ms per decode step of each op type (``key="by_op"``) or part (``"by_part"``) at two context lengths,
    the biggest growth first."""
    a = {r["name"]: r["ms"] for r in first[key]}
    b = {r["name"]: r["ms"] for r in last[key]}
    rows = sorted(set(a) | set(b), key=lambda n: -(b.get(n, 0.0) - a.get(n, 0.0)))[:top]
    c1, c2 = first["context"], last["context"]
    lines = [f"| {label} | ms / step at {c1} | at {c2} | growth ms | × |", "| --- | ---: | ---: | ---: | ---: |"]
    for n in rows:
        x, y = a.get(n, 0.0), b.get(n, 0.0)
        lines.append(
            f"| {n} | {x:.2f} | {y:.2f} | {y - x:+.2f} | {y / x:.1f}× |" if x else f"| {n} | 0 | {y:.2f} | {y:+.2f} | |"
        )
    total1, total2 = first["model_run_ms"], last["model_run_ms"]
    lines.append(f"| **`model_run`** | {total1:.2f} | {total2:.2f} | {total2 - total1:+.2f} | {total2 / total1:.1f}× |")
    return "\n".join(lines)


def markdown(doc: dict[str, Any], top: int = 12) -> str:
    """The run's conditions; per precision: ms per decode step, then op types and model parts with
    their share of ``model_run``; what grows between the shortest and the longest context."""
    data = doc["data"]
    c = data["config"]
    parts = [f"# Where ortstate's decode time goes (real-size model): {doc['name']}", conditions(doc)]
    for e in data["precisions"]:
        ctx = e.get("context", c.get("prompt"))
        head = f"#### {e['precision']} {e.get('variant', '')} ({e['engine']['name']}), context {ctx}"
        if "error" in e:
            parts.append(f"{head}\n\nfailed: {e['error']}")
            continue
        lines = [
            head,
            "",
            f"Decode step {e['step_ms']:.1f} ms (Generator, wall), of which ONNX Runtime `model_run` "
            f"{e['model_run_ms']:.1f} ms and the kernels of its {e.get('nodes_per_run', 0):.0f} nodes "
            f"{e['kernels_ms']:.1f} ms "
            f"({e['runs']} decode runs, positions {ctx}–{ctx + c['steps'] - 1}, "
            f"{c['threads']} threads, profiler on).",
            "",
            "| op type | ms / step | % of model_run |  | model part | ms / step | % of model_run |",
            "| --- | ---: | ---: | --- | --- | ---: | ---: |",
        ]
        ops, prt = e["by_op"][:top], e["by_part"]
        for i in range(max(len(ops), len(prt))):
            left = f"{ops[i]['name']} | {ops[i]['ms']:.2f} | {ops[i]['share']:.1%}" if i < len(ops) else " | | "
            right = f"{prt[i]['name']} | {prt[i]['ms']:.2f} | {prt[i]['share']:.1%}" if i < len(prt) else " | | "
            lines.append(f"| {left} |  | {right} |")
        others = ", ".join(f"`{o['name']}` {o['ms']:.2f}" for o in e.get("top_other_nodes", [])[:6])
        if others:
            lines += ["", f"Heaviest nodes in *other* (ms / step): {others}."]
        parts.append("\n".join(lines))
    ok = [e for e in data["precisions"] if "error" not in e]
    for key in dict.fromkeys((e["precision"], e.get("variant")) for e in ok):
        # runs from before --context profiled one prompt length (config's prompt) per precision
        runs = sorted((e for e in ok if (e["precision"], e.get("variant")) == key), key=lambda e: e.get("context", 0))
        if len(runs) > 1:
            first, last = runs[0], runs[-1]
            parts.append(
                f"#### {key[0]} {key[1] or ''}: what grows from context {first['context']} to {last['context']}\n\n"
                f"Decode step (wall) {first['step_ms']:.1f} → {last['step_ms']:.1f} ms.\n\n"
                + growth_table(first, last, "by_op", "op type")
                + "\n\n"
                + growth_table(first, last, "by_part", "model part")
            )
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "precisions", nargs="*", metavar="PRECISION", help=f"any of {', '.join(PRECISIONS)} (default: int4 fp32)"
    )
    p.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help=f"where realsize_build.py put the IRs (default {DEFAULT_CACHE})",
    )
    p.add_argument(
        "--engine", default="ortstate", help="the ortstate engine (as realsize.py --engine; default ortstate)"
    )
    p.add_argument("--reconvert", action="store_true", help="convert even when CACHE/onnx holds a converted model")
    p.add_argument("--threads", type=int, default=2, help="ONNX Runtime's threads (default 2)")
    p.add_argument("--variant", choices=VARIANTS, default=DEFAULT_VARIANT, help="the model variant (realsize_build.py)")
    p.add_argument("--prompt", type=int, default=32, help="tokens prefilled before the profiled decode steps")
    p.add_argument(
        "--context",
        type=lambda t: [int(x) for x in t.split(",")],
        help="comma-separated prompt lengths, each profiled in a session of its own (default: --prompt)",
    )
    p.add_argument("--steps", type=int, default=64, help="profiled decode steps (default 64)")
    p.add_argument("--warmup", type=int, default=4, help="decode steps of the warm-up generation (default 4)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per converting process (default 3600)")
    p.add_argument("--name", default="realsize-profile", help="result file stem (default realsize-profile)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    a = p.parse_args(argv)
    a.cache = a.cache.expanduser().resolve()
    a.context = a.context or [a.prompt]
    precisions = a.precisions or ["int4", "fp32"]
    unknown = [q for q in precisions if q not in PRECISIONS or not ir_ready(a.cache, q, a.variant)]
    if unknown:
        p.error(f"no built IR for {', '.join(unknown)} in {a.cache}: run realsize_build.py first")
    run = start_run("real-size-profile")
    data: dict[str, Any] = {
        "config": {"threads": a.threads, "prompt": a.prompt, "steps": a.steps, "contexts": a.context},
        "precisions": [e for q in precisions for e in profile(q, a)],
    }
    doc = write_results(a.out, a.name, run, data, markdown)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

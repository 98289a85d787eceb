"""The measured processes of the real-size benchmark; each prints one JSON line on stdout as its last line.

Each measurement that needs its own peak RSS runs in a fresh process (``python realsize_child.py
KIND ...``), started by ``realsize.py``:

- ``convert``: ``ortstate.convert(xml, out, **kwargs)``; its seconds and the process's peak RSS.
- ``load``: one engine: load seconds and RSS after loading, then a prefill and the decode steps,
  and the process's peak RSS over all of it.
- ``speed``: every engine in one process: a checked run each (tokens and logits kept, compared
  with the reference engine; it is also the warm-up), then timed rounds in alternating order.
- ``contexts``: every engine in one process, for each context length C: each engine prefills C
  tokens (timed; ``--prefill-rounds`` times, alternating, median) and decodes a few checked steps
  (the warm-up at that length), then timed rounds of decode steps alternate between the engines,
  each continuing its own state (``generate(..., reset=False)``): a round's steps append to the
  cache, so the positions drift by the steps taken (C to C + warm-up + rounds × steps). Tokens and
  logits are kept for every step and compared with the reference engine's.

Peak RSS is the kernel's high-water mark of the process (``ru_maxrss``), imports included; the RSS
after imports is reported beside it so the runtime's own share can be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.realsize_engines import REFERENCE, Engine, greedy, load_engine, peak_rss_mib, prompt_ids, rss_mib


def _engine(text: str) -> Engine:
    data = json.loads(text)
    return Engine(**data)


def convert(xml: Path, out: Path, kwargs: dict[str, Any]) -> dict[str, Any]:
    import ortstate

    base = rss_mib()
    started = time.perf_counter()
    ortstate.convert(xml, out, **kwargs)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "peak_rss_mib": peak_rss_mib(), "base_rss_mib": base}


def _vocab(ir_dir: Path) -> int:
    return int(json.loads((ir_dir / "config.json").read_text())["vocab_size"])


def load(engine: Engine, ir_dir: Path, onnx_path: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    import ortstate  # noqa: F401  (imports are the baseline, not the load)

    if engine.kind == "openvino":
        import openvino  # noqa: F401
    base = rss_mib()
    started = time.perf_counter()
    generator = load_engine(engine, ir_dir, onnx_path, args.threads)
    seconds = time.perf_counter() - started
    loaded = rss_mib()
    run = greedy(generator, prompt_ids(args.prompt, _vocab(ir_dir)), args.steps)
    return {
        "load_s": seconds,
        "base_rss_mib": base,
        "loaded_rss_mib": loaded,
        "peak_rss_mib": peak_rss_mib(),
        "prefill_ms": run["prefill_s"] * 1e3,
        "decode_p50_ms": float(np.median(run["decode_s"])) * 1e3,
        "tokens": run["tokens"],
    }


def _compare(mine: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Tokens equal? Max |logits| difference over the steps both fed the same tokens (up to the
    first differing token, included); the reference's smallest top-2 logit margin over those steps."""
    a, b = mine["tokens"], ref["tokens"]
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    upto = len(a) if first is None else first + 1
    diff = float(np.max(np.abs(mine["logits"][:upto] - ref["logits"][:upto])))
    top2 = np.sort(ref["logits"][:upto], axis=-1)[..., -2:]
    return {
        "tokens_match": first is None and len(a) == len(b),
        "first_mismatch": first,
        "max_abs_logits_diff": diff,
        "min_reference_margin": float(np.min(top2[..., 1] - top2[..., 0])),
    }


def speed(engines: list[Engine], ir_dir: Path, onnx: dict[str, Path], args: argparse.Namespace) -> dict[str, Any]:
    prompt = prompt_ids(args.prompt, _vocab(ir_dir))
    generators = {}
    for e in engines:
        started = time.perf_counter()
        generators[e.name] = load_engine(e, ir_dir, onnx.get(e.name), args.threads)
        print(f"  loaded {e.name} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    checked = {name: greedy(g, prompt, args.steps, keep_logits=True) for name, g in generators.items()}
    out: dict[str, Any] = {name: {"tokens": run["tokens"][:]} for name, run in checked.items()}
    if REFERENCE in checked:
        for name, run in checked.items():
            out[name] |= _compare(run, checked[REFERENCE])
    del checked
    prefill: dict[str, list[float]] = {n: [] for n in generators}
    decode: dict[str, list[list[float]]] = {n: [] for n in generators}
    names = list(generators)
    for k in range(args.rounds):
        print(f"  round {k + 1}/{args.rounds}", file=sys.stderr, flush=True)
        for name in names if k % 2 == 0 else names[::-1]:
            run = greedy(generators[name], prompt, args.steps)
            prefill[name].append(run["prefill_s"] * 1e3)
            decode[name].append([s * 1e3 for s in run["decode_s"]])
    for name in names:
        steps = np.concatenate(decode[name])
        out[name] |= {
            "prefill_ms": float(np.median(prefill[name])),
            "prefill_rounds_ms": prefill[name],
            "decode_p50_ms": float(np.median(steps)),
            "decode_p90_ms": float(np.percentile(steps, 90)),
            "decode_round_p50_ms": [float(np.median(r)) for r in decode[name]],
        }
    return out


def _continue(generator: Any, steps: int) -> dict[str, Any]:
    """``steps`` more greedy tokens after the state the last generation left (each step timed)."""
    tokens = generator.generate([], steps, stop_at_eos=False, keep_logits=True, reset=False)
    run = generator.last_run
    return {"tokens": tokens, "step_s": list(run.step_seconds), "logits": run.logits}


def contexts(engines: list[Engine], ir_dir: Path, onnx: dict[str, Path], args: argparse.Namespace) -> dict[str, Any]:
    """Prefill and decode speed at each context length (see the module docstring); per engine, per context."""
    lengths = [int(c) for c in args.contexts.split(",")]
    prompt = prompt_ids(max(lengths), _vocab(ir_dir))
    generators = {}
    for e in engines:
        started = time.perf_counter()
        generators[e.name] = load_engine(e, ir_dir, onnx.get(e.name), args.threads)
        print(f"  loaded {e.name} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    for g in generators.values():  # first inferences (allocations, kernel choice) outside any timing
        greedy(g, prompt[:16], 4)
    names, out = list(generators), {name: {} for name in generators}
    for i, length in enumerate(lengths):
        order = names if i % 2 == 0 else names[::-1]
        runs: dict[str, dict[str, Any]] = {}
        prefills: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.prefill_rounds):  # the last prefill's state is the one decoded from
            for name in order if r % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                run = greedy(generators[name], prompt[:length], args.warmup, keep_logits=True)
                prefills[name].append(run["prefill_s"] * 1e3)
                runs[name] = {"tokens": run["tokens"], "logits": [run["logits"]], "decode": []}
                print(
                    f"  context {length}: {name} prefilled in {run['prefill_s']:.1f} s "
                    f"(+ {args.warmup} steps: {time.perf_counter() - started:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )
        for k in range(args.rounds):
            for name in order if k % 2 == 0 else order[::-1]:
                step = _continue(generators[name], args.steps)
                runs[name]["tokens"] += step["tokens"]
                runs[name]["logits"].append(step["logits"])
                runs[name]["decode"].append([s * 1e3 for s in step["step_s"]])
        for name in names:
            r = runs[name]
            r["logits"] = np.concatenate(r["logits"])
            steps = np.concatenate(r["decode"])
            out[name][str(length)] = {
                "prefill_ms": float(np.median(prefills[name])),
                "prefill_rounds_ms": prefills[name],
                "decode_p50_ms": float(np.median(steps)),
                "decode_p90_ms": float(np.percentile(steps, 90)),
                "decode_round_p50_ms": [float(np.median(d)) for d in r["decode"]],
                "timed_positions": [length + args.warmup, length + len(r["tokens"]) - 2],  # first, last fed
                "tokens": r["tokens"],
            }
            print(
                f"  context {length}: {name} decode p50 {out[name][str(length)]['decode_p50_ms']:.1f} ms",
                file=sys.stderr,
                flush=True,
            )
        if REFERENCE in runs:
            for name in names:
                out[name][str(length)] |= _compare(runs[name], runs[REFERENCE])
        del runs
        for g in generators.values():
            g.reset()  # drop the caches of this length before the next
    return {"engines": out, "peak_rss_mib": peak_rss_mib()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("convert", "load", "speed", "contexts"))
    p.add_argument("--ir", type=Path, required=True, help="the IR folder (openvino_model.xml, config.json)")
    p.add_argument("--onnx", type=Path, help="convert: the output; load: the engine's converted model")
    p.add_argument("--convert-kwargs", default="{}", help="convert: JSON keyword arguments of ortstate.convert")
    p.add_argument("--engine", action="append", default=[], help="JSON of an Engine (speed: repeat it)")
    p.add_argument("--onnx-of", action="append", default=[], help="speed: ENGINE=PATH of each ortstate engine")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--contexts", default="32", help="contexts: comma-separated context lengths")
    p.add_argument("--warmup", type=int, default=4, help="contexts: checked steps after each prefill, not timed")
    p.add_argument("--prefill-rounds", type=int, default=1, help="contexts: prefills per engine and context")
    args = p.parse_args(argv)
    if args.kind == "convert":
        result = convert(args.ir / "openvino_model.xml", args.onnx, json.loads(args.convert_kwargs))
    elif args.kind == "load":
        result = load(_engine(args.engine[0]), args.ir, args.onnx, args)
    else:
        onnx = {k: Path(v) for k, v in (item.split("=", 1) for item in args.onnx_of)}
        measure = speed if args.kind == "speed" else contexts
        result = measure([_engine(e) for e in args.engine], args.ir, onnx, args)
    from google.protobuf.internal import api_implementation

    result["protobuf"] = api_implementation.Type()  # "upb" unless the environment forced pure Python
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

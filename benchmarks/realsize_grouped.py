"""The grouped decode step (``ortstate.passes.grouped_decode``) on and off, side by side in one
process: the real-size int4 model (Qwen2-0.5B's shape, 14 query heads over 2 KV heads; built by
``python -m benchmarks real-size-build int4``; ``--model-dir`` another optimum-intel IR folder),
converted once, two sessions of it loaded under ``ORTSTATE_GROUPED_DECODE`` (the runtime's public
setting: ``off`` for the kernel, ``--grouped`` for the other, ``on`` by default: the products at
every context, to see where they pay), each prefilled to the same context with the same prompt,
then decode steps alternating between them (ABAB..., BABA... on odd steps). Prints and writes the
median step of each and their ratio per context (the first two steps are warm-up), the largest
logit difference between them, the machine and the load average. The session made first runs a
few per cent faster or slower (memory placement): run it both ways (``--first``).

    python -m benchmarks grouped                      # contexts 32,1024,2048,4000, 40 steps
    python -m benchmarks grouped --first grouped      # the same, the other session made first
    python -m benchmarks grouped --model-dir models/llm/qwen2 --contexts 8,16 --steps 4 --threads 1 --out /tmp/g

Writes ``benchmarks/results/NAME.{json,md}`` (NAME: ``realsize-grouped-FIRST-first``, or
``--name``). Run it on a quiet machine; on the real-size model it needs ~6 GB of memory (two
sessions).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import ortstate
from benchmarks.common import RESULTS, conditions, start_run, write_results
from benchmarks.realsize_build import DEFAULT_CACHE, ir_dir
from ortstate.runtime.grouped_choice import ENV
from ortstate.timing import session_options

SESSIONS = ("kernel", "grouped")


@contextlib.contextmanager
def _grouped_decode(mode: str) -> Iterator[None]:
    """``ORTSTATE_GROUPED_DECODE=mode`` while a session loads (the runtime reads it then), as before after."""
    kept = os.environ.get(ENV)
    os.environ[ENV] = mode
    try:
        yield
    finally:
        if kept is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = kept


def _session(onnx_path: Path, mode: str, threads: int) -> ortstate.StatefulSession:
    with _grouped_decode(mode):
        options = session_options(threads, onnx.load(str(onnx_path), load_external_data=False))
        return ortstate.StatefulSession(onnx_path, options)


def _feeds(tokens: np.ndarray, past: int) -> dict[str, np.ndarray]:
    n = tokens.shape[1]
    return {
        "input_ids": tokens,
        "attention_mask": np.ones((1, past + n), np.int64),
        "position_ids": np.arange(past, past + n, dtype=np.int64)[None],
        "beam_idx": np.zeros(1, np.int32),
    }


def measure(onnx_path: Path, a: argparse.Namespace, vocab: int) -> list[dict[str, Any]]:
    """Per context: each session's median decode step (ms) and the largest logit difference."""
    order = list(SESSIONS) if a.first == "kernel" else list(reversed(SESSIONS))
    sessions = {name: _session(onnx_path, "off" if name == "kernel" else a.grouped, a.threads) for name in order}
    rng = np.random.default_rng(0)
    high = min(1000, vocab)
    rows = []
    for context in a.contexts:
        prompt = rng.integers(10, high, (1, context))
        requests = {}
        for name, session in sessions.items():
            requests[name] = session.create_infer_request()
            requests[name].infer(_feeds(prompt, 0))
        times: dict[str, list[float]] = {name: [] for name in requests}
        logits: dict[str, np.ndarray] = {}
        worst = 0.0
        for step in range(a.steps):
            feeds = _feeds(rng.integers(10, high, (1, 1)), context + step)
            for name in list(requests) if step % 2 == 0 else list(reversed(requests)):
                start = time.perf_counter()
                logits[name] = requests[name].infer(feeds)["logits"]
                times[name].append(time.perf_counter() - start)
            worst = max(worst, float(np.abs(logits["kernel"] - logits["grouped"]).max()))
        med = {name: float(np.median(t[2:])) * 1e3 for name, t in times.items()}  # the first two: warm-up
        rows.append({"context": context, **{f"{n}_ms": round(v, 2) for n, v in med.items()}, "max_dlogits": worst})
        print(
            f"realsize_grouped: context {context}: kernel {med['kernel']:.2f} ms, grouped {med['grouped']:.2f} ms "
            f"({med['grouped'] / med['kernel']:.3f}x), max |dlogits| {worst:.1e}",
            file=sys.stderr,
        )
    return rows


def markdown(doc: dict[str, Any]) -> str:
    """The run's conditions and one row per context."""
    data = doc["data"]
    lines = [
        f"# The grouped decode step on and off: {data['model']}, the {data['first']} session made first",
        "",
        conditions(doc),
        "",
        f"{data['heads']} query heads over {data['kv_heads']} KV heads, one process, decode steps alternating; "
        f"{data['threads']} thread{'s' * (data['threads'] != 1)}; median of {data['steps'] - 2} steps each; "
        f"the grouped session loaded with `{ENV}={data['grouped']}`, the kernel's with `{ENV}=off`.",
        "",
        "| context | GroupQueryAttention ms | grouped products ms | ratio | max abs Δlogits |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in data["rows"]:
        ratio = r["grouped_ms"] / r["kernel_ms"]
        lines.append(
            f"| {r['context']} | {r['kernel_ms']:.2f} | {r['grouped_ms']:.2f} | {ratio:.3f}× | {r['max_dlogits']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--contexts",
        type=lambda text: [int(c) for c in text.split(",")],
        default=[32, 1024, 2048, 4000],
        metavar="C1,C2,...",
        help="tokens prefilled before the decode steps, comma-separated (default 32,1024,2048,4000)",
    )
    p.add_argument("--steps", type=int, default=40, help="decode steps per context, 3 or more (default 40)")
    p.add_argument("--threads", type=int, default=2, help="ONNX Runtime's threads (default 2)")
    p.add_argument(
        "--first", choices=SESSIONS, default="kernel", help="the session made first (it can run a few %% faster)"
    )
    p.add_argument(
        "--grouped",
        choices=("on", "auto"),
        default="on",
        help="the grouped session's ORTSTATE_GROUPED_DECODE: on (every context, default) or auto (the "
        "pass's own thresholds: what a session does by default)",
    )
    p.add_argument("--model-dir", type=Path, help="an optimum-intel IR folder (default: the real-size int4 IR)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where real-size-build put it ({DEFAULT_CACHE})")
    p.add_argument("--name", help="result file stem (default realsize-grouped-FIRST-first)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    a = parser.parse_args(argv)
    folder = (a.model_dir or ir_dir(a.cache.expanduser(), "int4")).resolve()
    if not (folder / "openvino_model.xml").is_file():
        parser.error(
            f"{folder} has no openvino_model.xml (the real-size one: python -m benchmarks real-size-build int4)"
        )
    if a.steps < 3 or not a.contexts or min(a.contexts) < 1:
        parser.error("--steps is 3 or more (the first two are warm-up) and --contexts positive token counts")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    heads = config["num_attention_heads"]
    run = start_run("grouped")
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        ortstate.convert(folder / "openvino_model.xml", onnx_path)
        rows = measure(onnx_path, a, config["vocab_size"])
    data = {
        "model": folder.name if a.model_dir else "int4",
        "heads": heads,
        "kv_heads": config.get("num_key_value_heads", heads),
        "threads": a.threads,
        "steps": a.steps,
        "first": a.first,
        "grouped": a.grouped,
        "rows": rows,
    }
    doc = write_results(a.out, a.name or f"realsize-grouped-{a.first}-first", run, data, markdown)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The measured process of the LLM prefix-caching benchmark: one workload on one engine; prints one
JSON line on stdout as its last line (``llm_prefix.py`` starts one per workload, engine and round).

Workloads (their sizes in ``--spec``, a JSON object of :data:`SPEC`'s keys; ids are seeded random
token ids in [0, vocab), see :func:`workload_ids`; greedy, eos ignored):

- ``chat``: a plain client's chat: turn 1's prompt is ``turn_tokens`` new ids; turn t's prompt is
  turn t-1's prompt + the ``turn_new`` tokens it generated + ``turn_tokens`` new ids. Each turn is one
  request, made after the previous one finished; its TTFT runs from the request to its first token.
- ``shared``: ``requests`` prompts of the same ``system`` ids + ``own`` ids of their own, ``shared_new``
  new tokens each, all requested at once, after the system prompt alone was requested once (untimed:
  what a cache may hold). Total = from the requests to the last token.
- ``structured``: ``streams`` prompts of ``prompt`` ids, ``new`` tokens each, all at once, on ortstate's
  ContinuousBatcher: engine ``ortstate`` unconstrained, ``ortstate-schema`` with ``json_schema`` =
  :data:`SCHEMA` (every answer decoded with the folder's tokenizer and validated).

Engines: ``ortstate`` / ``ortstate-nocache`` (``ContinuousBatcher.from_dir(DIR, threads=T,
int8_activations=False, max_num_batched_tokens=B, prefix_cache=True/False)``; an ortstate whose
``from_dir`` has no ``prefix_cache`` runs ``ortstate-nocache`` without it and refuses ``ortstate``),
``ov-cache`` / ``ov-nocache`` (OpenVINO GenAI's ``ContinuousBatchingPipeline``, exact config, its
``SchedulerConfig`` with ``enable_prefix_caching`` True/False, ``max_num_batched_tokens`` B and
``cache_size`` ``--kv-cache-gb``). Every engine first runs one untimed request of ``warm_prompt``
ids (ids of their own) and ``warmup`` new tokens (``structured``: ``new``; ``ortstate-schema`` with the schema, which
compiles it). A failure is ``{"error": "<one line>"}``, a row of the report.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.realsize_engines import OV_EXACT
from ortstate.timing.llm_streams import Streams, openvino_genai_pipeline, prompts, run_openvino_genai, stream_metrics

WORKLOADS = ("chat", "shared", "structured")
ENGINES = {  # workload -> its engines
    "chat": ("ortstate", "ortstate-nocache", "ov-cache", "ov-nocache"),
    "shared": ("ortstate", "ortstate-nocache", "ov-cache", "ov-nocache"),
    "structured": ("ortstate", "ortstate-schema"),
}
SPEC = {  # issue 39's workloads (its anchor: OpenVINO GenAI with prefix caching)
    "turns": 8,
    "turn_tokens": 64,
    "turn_new": 32,
    "system": 1000,
    "own": 16,
    "requests": 32,
    "shared_new": 32,
    "streams": 32,
    "prompt": 128,
    "new": 64,
    "warm_prompt": 256,
    "warmup": 4,
    "batched": 256,
}
# an answer a client could ask for: strings, a number and an array (random weights write long strings:
# the schema's closing plan ends each answer within its token budget)
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
Run = Callable[..., Streams]  # (prompts, new tokens, **search) -> every stream's tokens and clocks


class Unavailable(Exception):
    """An engine this ortstate (or this machine) cannot run; its message is the row's reason."""


def workload_ids(spec: dict[str, int], vocab: int, seed: int) -> dict[str, Any]:
    """Every id list the workloads use, each from a seed of its own (so no two share a prefix):
    ``chat`` (each turn's new ids), ``system``, ``own`` (each shared request's), ``structured``
    (its prompts) and ``warm`` (the untimed first request)."""
    return {
        "chat": prompts(spec["turns"], spec["turn_tokens"], vocab, seed),
        "system": prompts(1, spec["system"], vocab, seed + 1)[0],
        "own": prompts(spec["requests"], spec["own"], vocab, seed + 2),
        "structured": prompts(spec["streams"], spec["prompt"], vocab, seed + 3),
        "warm": prompts(1, spec["warm_prompt"], vocab, seed + 4)[0],
    }


# -- the workloads, on any engine's run ------------------------------------------------------------
def run_chat(run: Run, turn_ids: list[list[int]], new: int) -> dict[str, Any]:
    """Each turn one request after the previous finished, its prompt the whole history so far."""
    prompt: list[int] = []
    turns, tokens = [], []
    for ids in turn_ids:
        prompt = prompt + ids
        s = run([prompt], new)
        times, got = s.times[0], s.tokens[0]
        turns.append({"prompt": len(prompt), "ttft_ms": (times[0] - s.t0) * 1e3, "ms": (times[-1] - s.t0) * 1e3})
        tokens.append(got)
        prompt = prompt + got
    ttfts = [t["ttft_ms"] for t in turns]
    return {
        "turns": turns,
        "total_s": sum(t["ms"] for t in turns) / 1e3,
        "ttft_p50_ms": float(_percentile(ttfts, 50)),
        "ttft_p99_ms": float(_percentile(ttfts, 99)),
        "tokens": tokens,
    }


def run_shared(run: Run, system: list[int], own: list[list[int]], new: int) -> dict[str, Any]:
    """The system prompt alone once (untimed), then every request at once."""
    run([system], 1)
    s = run([system + ids for ids in own], new)
    m = stream_metrics(s.times, s.t0, s.end)
    return {"total_s": m["wall_s"], **_rates(m), "tokens": s.tokens}


def run_structured(run: Run, prompt_list: list[list[int]], new: int, check: Callable | None) -> dict[str, Any]:
    """Every prompt at once (``check``: the schema run, each answer validated by it)."""
    s = run(prompt_list, new, **({"json_schema": SCHEMA} if check else {}))
    m = stream_metrics(s.times, s.t0, s.end)
    out = {"total_s": m["wall_s"], **_rates(m), "tokens": s.tokens}
    out["answer_tokens_mean"] = sum(map(len, s.tokens)) / len(s.tokens)
    if check is not None:
        problems = [p for p in map(check, s.tokens) if p]
        out |= {"answers": len(s.tokens), "valid": len(s.tokens) - len(problems), "invalid": problems[:1]}
    return out


def _rates(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")}


def _percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q))


# -- engines -----------------------------------------------------------------------------------------
def ortstate_run(ir: Path, a: argparse.Namespace, caching: bool | None) -> tuple[Run, str]:
    """ContinuousBatcher's ``stream()`` consumers on an event loop of the call's own (``caching`` None:
    the batcher's default); a note when this ortstate has no ``prefix_cache`` option."""
    from ortstate.generate import ContinuousBatcher

    kwargs: dict[str, Any] = {"threads": a.threads, "int8_activations": False}
    kwargs["max_num_batched_tokens"] = a.spec["batched"]
    note = ""
    if caching is not None:
        if "prefix_cache" in inspect.signature(ContinuousBatcher.from_dir).parameters:
            kwargs["prefix_cache"] = caching
        elif caching:
            raise Unavailable("this ortstate has no prefix caching")
        else:
            note = "this ortstate has no prefix_cache option: no cache to turn off"
    batcher = ContinuousBatcher.from_dir(ir, **kwargs)

    def run(prompt_list: list[list[int]], new: int, **search: Any) -> Streams:
        return asyncio.run(_drive(batcher, prompt_list, new, search))

    return run, note


async def _drive(batcher: Any, prompt_list: list[list[int]], new: int, search: dict[str, Any]) -> Streams:
    """Every prompt requested at once (the clock starts), each stream consumed by its own task."""
    out = Streams(len(prompt_list))

    async def consume(i: int) -> None:
        async for token in batcher.stream(prompt_list[i], new, stop_at_eos=False, **search):
            out.add(i, [token])

    await asyncio.gather(*(consume(i) for i in range(len(prompt_list))))
    return out


def ov_run(ir: Path, a: argparse.Namespace, caching: bool) -> tuple[Run, str]:
    """OpenVINO GenAI's pipeline, exact config, prefix caching on or off."""
    try:
        scheduler = {"enable_prefix_caching": caching, "max_num_batched_tokens": a.spec["batched"]}
        pipe = openvino_genai_pipeline(ir, a.threads, a.kv_cache_gb, OV_EXACT, scheduler)
    except ImportError as exc:
        raise Unavailable(f"openvino-genai is not installed ({exc})") from None
    return (lambda prompt_list, new: run_openvino_genai(pipe, prompt_list, new)), ""


def schema_check(ir: Path) -> Callable[[list[int]], str]:
    """Why an answer is not JSON valid against :data:`SCHEMA` ("" when it is), decoded with the
    folder's tokenizer and checked by ``jsonschema``."""
    from ortstate.generate import Tokenizer

    try:
        import jsonschema
    except ImportError:
        raise Unavailable("jsonschema is not installed (pip install -e '.[dev]')") from None
    tokenizer = Tokenizer.from_dir(ir)

    def check(tokens: list[int]) -> str:
        text = tokenizer.decode(tokens)
        try:
            jsonschema.validate(json.loads(text), SCHEMA)
        except (ValueError, jsonschema.ValidationError) as exc:
            return f"{_one_line(exc)[:120]} in {text[:80]!r}"
        return ""

    return check


# -- the process -------------------------------------------------------------------------------------
def measure(a: argparse.Namespace) -> dict[str, Any]:
    """Load the engine, warm it up, run the workload once."""
    vocab = int(json.loads((a.ir / "config.json").read_text())["vocab_size"])
    ids = workload_ids(a.spec, vocab, a.seed)
    started = time.perf_counter()
    check = schema_check(a.ir) if a.engine == "ortstate-schema" else None
    if a.engine.startswith("ov-"):
        run, note = ov_run(a.ir, a, a.engine == "ov-cache")
    else:
        caching = None if a.workload == "structured" else a.engine == "ortstate"
        run, note = ortstate_run(a.ir, a, caching)
    warm_search = {"json_schema": SCHEMA} if check else {}
    warm_new = a.spec["new"] if a.workload == "structured" else a.spec["warmup"]  # a schema needs its budget
    try:
        run([ids["warm"]], warm_new, **warm_search)
    except Exception as exc:
        if check and getattr(exc, "field", None) == "json_schema":  # a batcher that refuses schemas
            raise Unavailable(f"this ortstate's ContinuousBatcher refuses json_schema ({exc})") from None
        raise
    load_s = time.perf_counter() - started
    print(f"  {a.workload} {a.engine}: loaded and warmed up in {load_s:.1f} s", file=sys.stderr, flush=True)
    if a.workload == "chat":
        result = run_chat(run, ids["chat"], a.spec["turn_new"])
    elif a.workload == "shared":
        result = run_shared(run, ids["system"], ids["own"], a.spec["shared_new"])
    else:
        result = run_structured(run, ids["structured"], a.spec["new"], check)
    return result | {"note": note, "load_s": load_s}


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text}"[:300]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", choices=WORKLOADS)
    p.add_argument("engine", choices=sorted({e for engines in ENGINES.values() for e in engines}))
    p.add_argument("--ir", type=Path, required=True, help="the optimum-intel IR folder")
    p.add_argument("--spec", type=json.loads, default={}, help="the workloads' sizes (JSON; SPEC's keys)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=20240607)
    p.add_argument("--kv-cache-gb", type=int, default=2, help="OV GenAI's cache_size")
    a = p.parse_args(argv)
    a.spec = SPEC | a.spec
    if a.engine not in ENGINES[a.workload]:
        p.error(f"{a.workload} runs on {', '.join(ENGINES[a.workload])}")
    try:
        result = measure(a)
    except Unavailable as exc:
        print(f"  {a.workload} {a.engine}: {exc}", file=sys.stderr, flush=True)
        result = {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a failed engine is a row of the report, not a failed benchmark
        print(f"  {a.workload} {a.engine}: {_one_line(exc)}", file=sys.stderr, flush=True)
        result = {"error": _one_line(exc)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

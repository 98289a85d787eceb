"""Many LLM streams at once (``ortstate bench DIR --llm-streams 1,8,32``): N prompts of random ids
requested at once, each generating G greedy tokens, served these ways in this process:

- ``pool``: :class:`~ortstate.generate.ContinuousBatcher` (every stream decoding in one batched run
  per tick, prompts in chunks between them), N concurrent ``stream()`` consumers on one event loop
  (what a server streaming tokens does);
- ``pool-many``: the same batcher's ``generate_many`` (all prompts in, all token lists out: no
  event loop, no per-token times);
- ``sequential``: one :class:`~ortstate.generate.Generator`, the prompts one after another;
- ``openvino-genai``: OpenVINO GenAI's ``ContinuousBatchingPipeline`` on the same IR with the exact
  config (f32 inference and KV cache, no dynamic quantization), where ``openvino_genai`` is
  installed (a benchmark anchor, never a dependency of ortstate).

Per runner and N: aggregate output tokens/s (all new tokens over the wall time from the requests to
the last token), time to first token and inter-token latency p50/p99 (every stream's gaps pooled),
and whether each stream's tokens equal the sequential runner's. Every runner is loaded first and
warmed up at the largest N (a first run at a new batch size pays ONNX Runtime's allocations);
then ``rounds`` rounds run every runner at each N, alternating their order (ABC, CBA) so drift on
a shared machine cancels, and each figure is the median over the rounds. ``benchmarks/llm_streams.py`` runs
the same measures with each engine in a process of its own (peak memory per engine, OpenVINO
GenAI's default config, int8 activations).
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..verify.reference import OV_CONFIG  # OpenVINO's exact config, as verify compares with it

__all__ = [
    "LLM_RUNNERS",
    "LlmRow",
    "Streams",
    "llm_table",
    "measure_llm_streams",
    "openvino_genai_pipeline",
    "openvino_genai_unavailable",
    "prompts",
    "run_openvino_genai",
    "stream_metrics",
]

LLM_RUNNERS = ("sequential", "pool", "pool-many", "openvino-genai")  # table order


def prompts(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """``count`` prompts of ``length`` random ids in [0, vocab); prompt ``i`` depends on ``seed`` and ``i``
    only, so it is the same whatever the count (tokens compare across stream counts)."""
    return [np.random.default_rng([seed, i]).integers(0, vocab, size=length).tolist() for i in range(count)]


class Streams:
    """The tokens and their arrival clocks of every stream, from the moment all requests were made."""

    def __init__(self, count: int) -> None:
        self.tokens: list[list[int]] = [[] for _ in range(count)]
        self.times: list[list[float]] = [[] for _ in range(count)]
        self.t0 = time.perf_counter()
        self.end: float | None = None

    def add(self, i: int, tokens: Sequence[int], clock: float | None = None) -> None:
        now = time.perf_counter() if clock is None else clock
        self.tokens[i] += [int(t) for t in tokens]
        self.times[i] += [now] * len(tokens)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) * 1e3 if values else None


def stream_metrics(times: list[list[float]], t0: float, end: float | None = None) -> dict[str, Any]:
    """Aggregate throughput and latencies of streams that all started at ``t0``.

    Args:
        times: per stream, the clock (seconds) at which each of its new tokens arrived.
        t0: the clock when the first request was made.
        end: the clock at the last token, when ``times`` is empty (an engine without per-token times).

    Returns:
        ``tokens``, ``wall_s`` (``t0`` to the last token), ``tokens_per_s`` (all streams' new tokens over
        that wall time), time to first token and inter-token latency (every stream's gaps pooled)
        p50/p99 in ms (None without per-token times).
    """
    tokens = sum(len(t) for t in times)
    last = max((t[-1] for t in times if t), default=end)
    wall = (last if last is not None else t0) - t0
    firsts = [t[0] - t0 for t in times if t]
    gaps = [b - a for t in times for a, b in zip(t, t[1:])]
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall if wall > 0 else None,
        "ttft_p50_ms": _pct(firsts, 50),
        "ttft_p99_ms": _pct(firsts, 99),
        "itl_p50_ms": _pct(gaps, 50),
        "itl_p99_ms": _pct(gaps, 99),
    }


@dataclass(frozen=True)
class LlmRow:
    """One runner at one stream count."""

    runner: str
    streams: int
    tokens_per_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    same_tokens: int  # streams whose tokens equal the sequential runner's (-1: not compared)


def openvino_genai_unavailable() -> str | None:
    """Why the OpenVINO GenAI rows cannot run, or None."""
    if importlib.util.find_spec("openvino_genai") is None:
        return "openvino-genai is not installed (pip install openvino-genai==<the openvino version>)"
    return None


def run_pool(batcher: Any, prompt_list: list[list[int]], new: int) -> Streams:
    """Every prompt at once through ``batcher.stream``, each consumed by its own task."""

    async def main() -> Streams:
        out = Streams(len(prompt_list))

        async def consume(i: int) -> None:
            tokens, times = out.tokens[i], out.times[i]  # what out.add does, a token at a time
            async for token in batcher.stream(prompt_list[i], new, stop_at_eos=False):
                times.append(time.perf_counter())
                tokens.append(token)

        await asyncio.gather(*(consume(i) for i in range(len(prompt_list))))
        return out

    return asyncio.run(main())


def run_sequential(generator: Any, prompt_list: list[list[int]], new: int) -> Streams:
    out = Streams(len(prompt_list))
    for i, prompt in enumerate(prompt_list):
        generator.generate(prompt, new, stop_at_eos=False, stream=lambda t, i=i: out.add(i, [t]))
    return out


def openvino_genai_pipeline(
    folder: Path,
    threads: int,
    cache_gb: int,
    props: dict[str, str] | None = None,
    scheduler_fields: dict[str, Any] | None = None,
) -> Any:
    """OpenVINO GenAI's continuous-batching pipeline on ``folder`` (``props``: the exact config;
    ``scheduler_fields``: ``SchedulerConfig`` fields set besides ``cache_size``, e.g.
    ``enable_prefix_caching``, ``max_num_batched_tokens``)."""
    import openvino_genai as genai

    scheduler = genai.SchedulerConfig()  # max_num_batched_tokens, dynamic_split_fuse: its defaults
    scheduler.cache_size = cache_gb
    for field, value in (scheduler_fields or {}).items():
        if not hasattr(scheduler, field):  # a misspelt field would set nothing and measure the default
            raise ValueError(f"openvino_genai.SchedulerConfig has no field {field!r}")
        setattr(scheduler, field, value)
    config = {**(OV_CONFIG if props is None else props), "INFERENCE_NUM_THREADS": threads}
    return genai.ContinuousBatchingPipeline(str(folder), scheduler, "CPU", config)


def run_openvino_genai(pipe: Any, prompt_list: list[list[int]], new: int) -> Streams:
    """Every prompt added at once, the pipeline stepped until all are done, each token timed at the
    step that made it."""
    import openvino as ov
    import openvino_genai as genai

    config = genai.GenerationConfig()
    config.max_new_tokens = new
    config.ignore_eos = True  # not min_new_tokens: it masks the eos logit, and greedy tokens would change
    if pipe.get_config().eos_token_id < 0:  # an IR without eos (random weights): OV GenAI refuses -1
        config.eos_token_id, config.stop_token_ids = 0, {0}  # inert: eos is ignored
    out = Streams(len(prompt_list))
    handles = [pipe.add_request(i, ov.Tensor(np.array([p], np.int64)), config) for i, p in enumerate(prompt_list)]
    while pipe.has_non_finished_requests():
        pipe.step()
        now = time.perf_counter()
        for i, handle in enumerate(handles):
            if handle.can_read():
                for output in handle.read().values():  # one sequence per request (greedy)
                    out.add(i, output.generated_ids, now)
    return out


def run_pool_many(batcher: Any, prompt_list: list[list[int]], new: int) -> Streams:
    """Every prompt through ``batcher.generate_many``: tokens timed at its return."""
    out = Streams(len(prompt_list))
    tokens = batcher.generate_many(prompt_list, new, stop_at_eos=False)
    out.end = time.perf_counter()
    out.tokens = [list(t) for t in tokens]
    return out


def measure_llm_streams(
    folder: Path,
    counts: Sequence[int],
    prompt: int,
    new: int,
    threads: int,
    runners: Sequence[str],
    progress: Callable[[str], None] = lambda _: None,
    rounds: int = 1,
) -> list[LlmRow]:
    """Every runner at every stream count (see the module docstring): the medians of ``rounds``."""
    from ..generate import ContinuousBatcher, Generator, find_model_files, read_config
    from ..runtime import StatefulSession
    from .runners import session_options

    config = _config(folder)
    vocab = int(config.get("vocab_size") or 256)
    largest = max(counts)
    unknown = [r for r in runners if r not in LLM_RUNNERS]
    if unknown:
        raise ValueError(f"unknown runner {unknown[0]!r}")
    runs: dict[str, Callable[[list[list[int]], int], Streams]] = {}
    engines: list[Any] = []
    try:
        batcher = None
        for runner in sorted(runners, key=LLM_RUNNERS.index):
            progress(f"{runner}: loading")
            if runner.startswith("pool"):
                if batcher is None:
                    batcher = ContinuousBatcher.from_dir(folder, slots=largest, threads=threads)
                    engines.append(batcher)
                many = runner == "pool-many"
                runs[runner] = lambda p, n, b=batcher, m=many: (run_pool_many if m else run_pool)(b, p, n)
            elif runner == "sequential":
                files = find_model_files(folder)
                session = StatefulSession(files.decoder, session_options(threads))
                generator = Generator(session, read_config(folder), folder=files.folder)
                runs[runner] = lambda p, n, g=generator: run_sequential(g, p, n)
            else:
                cache_gb = max(1, -(-largest * (prompt + new) * _token_bytes(config) // 2**30))
                pipe = openvino_genai_pipeline(folder, threads, cache_gb)
                engines.append(pipe)
                runs[runner] = lambda p, n, e=pipe: run_openvino_genai(e, p, n)
        for runner, run in runs.items():  # batch sizes seen once before timing (one at a time: batch 1)
            progress(f"{runner}: warm-up")
            run(prompts(1 if runner == "sequential" else largest, prompt, vocab, 1), 2)
        rows = []
        for n in counts:
            got: dict[str, list[Streams]] = {r: [] for r in runs}
            for k in range(rounds):
                progress(f"{n} streams, round {k + 1}/{rounds}")
                for runner in list(runs) if k % 2 == 0 else list(runs)[::-1]:
                    got[runner].append(runs[runner](prompts(n, prompt, vocab, 0), new))
            rows += _rows(n, got)
        return rows
    finally:
        for engine in engines:
            close = getattr(engine, "close", None)
            if callable(close):
                close()


def _rows(n: int, got: dict[str, list[Streams]]) -> list[LlmRow]:
    """One row per runner: medians over its rounds; tokens compared with the sequential runner's."""
    reference = got["sequential"][0].tokens if "sequential" in got else None
    rows = []
    for runner, results in got.items():
        metrics = []
        for r in results:
            m = stream_metrics(r.times, r.t0, r.end)
            if not any(r.times):  # no per-token times (generate_many): the rate only
                m = dict.fromkeys(m) | {"tokens_per_s": sum(map(len, r.tokens)) / (r.end - r.t0)}  # type: ignore[operator]
            metrics.append(m)
        same = -1 if reference is None else min(sum(a == b for a, b in zip(reference, r.tokens)) for r in results)
        med = {k: _median([m[k] for m in metrics]) for k in ("tokens_per_s", *_LATENCIES)}
        rows.append(LlmRow(runner, n, med["tokens_per_s"] or 0.0, *(med[k] for k in _LATENCIES), same))
    return rows


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.median(kept)) if kept else None


_LATENCIES = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")


def _config(folder: Path) -> dict[str, Any]:
    import json

    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _token_bytes(c: dict[str, Any]) -> int:
    """f32 KV bytes of one position of one stream, from config.json (a generous guess without it)."""
    try:
        heads = c.get("num_key_value_heads") or c["num_attention_heads"]
        return 2 * 4 * c["num_hidden_layers"] * heads * (c["hidden_size"] // c["num_attention_heads"])
    except (KeyError, TypeError, ZeroDivisionError):
        return 1 << 16


def _cell(value: float | None, fmt: str = ",.1f") -> str:
    return "—" if value is None else format(value, fmt)


def llm_table(rows: Sequence[LlmRow]) -> str:
    """The rows as markdown, with each runner's tokens/s over the sequential runner's."""
    base = {r.streams: r.tokens_per_s for r in rows if r.runner == "sequential"}
    lines = [
        "| streams | runner | tokens/s | × sequential | TTFT p50 / p99 ms | ITL p50 / p99 ms | same tokens |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in sorted(rows, key=lambda r: (r.streams, LLM_RUNNERS.index(r.runner))):
        ratio = f"{r.tokens_per_s / base[r.streams]:.2f}×" if base.get(r.streams) else "—"
        same = "—" if r.same_tokens < 0 else f"{r.same_tokens}/{r.streams}"
        lines.append(
            f"| {r.streams} | {r.runner} | {r.tokens_per_s:,.1f} | {ratio} | {_cell(r.ttft_p50_ms, ',.0f')} / "
            f"{_cell(r.ttft_p99_ms, ',.0f')} | {_cell(r.itl_p50_ms)} / {_cell(r.itl_p99_ms)} | {same} |"
        )
    return "\n".join(lines)


def llm_document(rows: Sequence[LlmRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]

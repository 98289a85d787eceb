"""The measured process of the LLM-streams benchmark: one engine, N concurrent streams; prints one JSON
line on stdout as its last line (``llm_streams.py`` starts one per engine, stream count and round).

All N requests are made at once (clock ``t0``) and each new token is timestamped as it arrives:

- ``ov-exact`` / ``ov-default``: OpenVINO GenAI's ``ContinuousBatchingPipeline`` on the IR folder
  (exact: ``KV_CACHE_PRECISION=f32``, ``INFERENCE_PRECISION_HINT=f32``,
  ``DYNAMIC_QUANTIZATION_GROUP_SIZE=0``; default: only ``INFERENCE_NUM_THREADS``). Every request is
  added with ``add_request(i, ov.Tensor(ids), config)`` (``max_new_tokens=G``, ``ignore_eos``; not
  ``min_new_tokens``, which masks the eos logit and so changes greedy tokens; a model without an eos
  id gets an inert one, as OV GenAI refuses -1), then ``step()`` runs while
  ``has_non_finished_requests()``; after each step every ``GenerationHandle`` that ``can_read()`` is
  ``read()`` (the tokens that step made) and those tokens get the clock after the step.
- ``sequential``: ortstate's ``Generator`` (the converted ONNX file given, ``threads`` intra-op, as
  ``realsize_engines.load_engine`` builds it), the prompts one after another; its ``stream``
  callback timestamps each token. ``--limit K`` runs the first K prompts only and reports the queue of
  N as it would be sequentially (``queue_times``).
- ``pool`` / ``pool-int8``: ``ortstate.generate.ContinuousBatcher.from_dir(DIR, threads=T,
  int8_activations=..., kv_cache_bytes=...)`` (and ``slots=N`` when it takes that); N ``async for token
  in batcher.stream(prompt, max_new_tokens=G, stop_at_eos=False)`` consumers (``ignore_eos=True`` for
  a ``stream`` without ``stop_at_eos``) driven by one asyncio loop (``generate_many`` when there is no
  ``stream``: aggregate only). When the class is missing or fails, the result is ``{"error": "<one
  line>"}``.
- ``pool-fake``: the same driver over :class:`StandInBatcher` (lone ``Generator`` runs in a worker
  thread, one at a time): checks the harness, not a figure.

Every engine first runs one untimed request (``--warmup`` new tokens). Peak RSS is the process's
``ru_maxrss`` at the end (imports, loading and conversion included); ``loaded_rss_mib`` the RSS after
loading and warming up.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from benchmarks.llm_streams_report import queue_times, stream_metrics
from benchmarks.realsize_engines import OV_EXACT, Engine, load_engine, peak_rss_mib, rss_mib
from ortstate.timing.llm_streams import Streams, openvino_genai_pipeline, prompts, run_openvino_genai

OV_ENGINES = {"ov-exact": OV_EXACT, "ov-default": {}}
POOL_ENGINES = {"pool": False, "pool-int8": True}  # name -> int8_activations


def _vocab(ir: Path) -> int:
    return int(json.loads((ir / "config.json").read_text())["vocab_size"])


def run_ov(name: str, ir: Path, prompt_list: list[list[int]], a: argparse.Namespace) -> tuple[Streams, str]:
    pipe = openvino_genai_pipeline(ir, a.threads, a.kv_cache_gb, OV_ENGINES[name])
    if a.warmup:
        run_openvino_genai(pipe, prompt_list[:1], a.warmup)
    _loaded(a)
    return run_openvino_genai(pipe, prompt_list, a.new), ""


# -- ortstate, one stream at a time --------------------------------------------------------------------
def run_sequential(ir: Path, prompt_list: list[list[int]], a: argparse.Namespace) -> tuple[Streams, str]:
    engine = Engine("sequential", "ortstate", "ortstate, one stream at a time")
    generator = load_engine(engine, ir, a.onnx, a.threads)
    if a.warmup:
        generator.generate(prompt_list[0], a.warmup, stop_at_eos=False)
    _loaded(a)
    run = prompt_list[: a.limit] if a.limit else prompt_list
    out = Streams(len(run))
    for i, prompt in enumerate(run):
        generator.generate(prompt, a.new, stop_at_eos=False, stream=lambda t, i=i: out.add(i, [t]))
    if len(run) == len(prompt_list):
        return out, ""
    out.times = queue_times(out.times, out.t0, len(prompt_list))
    return out, f"{len(run)} of {len(prompt_list)} streams run, the queue of {len(prompt_list)} computed as sequential"


# -- ortstate's ContinuousBatcher (and the stand-in) ---------------------------------------------------
class StandInBatcher:
    """What the harness expects of ``ContinuousBatcher``, done with lone ``Generator`` runs (one at a time,
    in a worker thread): the tokens are a lone Generator's, the speed is one stream at a time's."""

    def __init__(self, generator: Any) -> None:
        self._generator = generator
        self._lock = threading.Lock()

    @classmethod
    def from_dir(
        cls, model_dir: Path, *, threads: int, int8_activations: bool, kv_cache_bytes: int | None
    ) -> StandInBatcher:
        from ortstate.generate import Generator

        del threads, int8_activations, kv_cache_bytes  # a stand-in: ortstate's defaults
        return cls(Generator.from_dir(model_dir))

    async def stream(self, prompt: list[int], max_new_tokens: int, stop_at_eos: bool = True) -> AsyncIterator[int]:
        loop, queue = asyncio.get_running_loop(), asyncio.Queue()

        def work() -> None:
            try:
                with self._lock:
                    self._generator.generate(
                        prompt,
                        max_new_tokens,
                        stop_at_eos=stop_at_eos,
                        stream=lambda t: loop.call_soon_threadsafe(queue.put_nowait, t),
                    )
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        done = loop.run_in_executor(None, work)
        while (token := await queue.get()) is not None:
            yield token
        await done


def _batcher_class(name: str) -> Any:
    if name == "pool-fake":
        return StandInBatcher
    import ortstate.generate

    batcher = getattr(ortstate.generate, "ContinuousBatcher", None)  # issue 29's: looked up only here
    if batcher is None:
        raise LookupError("ortstate.generate has no ContinuousBatcher in this ortstate")
    return batcher


def _parameters(fn: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def _no_eos(fn: Any) -> dict[str, bool]:
    """The keyword that makes ``fn`` go on past eos: ``stop_at_eos=False`` (as ``Generator``) when it has
    that parameter, else ``ignore_eos=True``."""
    return {"stop_at_eos": False} if "stop_at_eos" in _parameters(fn) else {"ignore_eos": True}


async def _drive(batcher: Any, prompt_list: list[list[int]], new: int) -> Streams:
    """Every prompt at once, each stream consumed by its own task; ``generate_many`` without ``stream``."""
    out = Streams(len(prompt_list))
    if not hasattr(batcher, "stream"):
        many = batcher.generate_many
        rows = await asyncio.to_thread(many, prompt_list, max_new_tokens=new, **_no_eos(many))
        out.end = time.perf_counter()
        out.tokens = [[int(t) for t in row] for row in rows]
        return out
    no_eos = _no_eos(batcher.stream)

    async def consume(i: int) -> None:
        async for token in batcher.stream(prompt_list[i], max_new_tokens=new, **no_eos):
            out.add(i, [token])

    await asyncio.gather(*(consume(i) for i in range(len(prompt_list))))
    return out


async def _close(batcher: Any) -> None:
    for name in ("aclose", "close"):
        close = getattr(batcher, name, None)
        if callable(close):
            result = close()
            if asyncio.iscoroutine(result):
                await result
            return


def run_pool(name: str, ir: Path, prompt_list: list[list[int]], a: argparse.Namespace) -> tuple[Streams, str]:
    cls = _batcher_class(name)
    kv = int(a.kv_cache_gb * 2**30) if a.pool_same_kv else None
    kwargs = {"threads": a.threads, "int8_activations": POOL_ENGINES.get(name, False), "kv_cache_bytes": kv}
    if getattr(a, "onnx", None) and "model" in _parameters(
        cls.from_dir
    ):  # converted in another process, as the sequential engine's
        kwargs.update(model=a.onnx, int8_activations=False)
    if "slots" in _parameters(cls.from_dir):
        kwargs["slots"] = len(prompt_list)  # every stream generating at once, as OV GenAI schedules them
    batcher = cls.from_dir(ir, **kwargs)

    async def main() -> Streams:
        try:
            if a.warmup:
                await _drive(batcher, prompt_list[:1], a.warmup)
            _loaded(a)
            return await _drive(batcher, prompt_list, a.new)
        finally:
            await _close(batcher)

    note = "" if hasattr(batcher, "stream") else "generate_many: no per-token times"
    return asyncio.run(main()), note


# -- the process -------------------------------------------------------------------------------------
def _loaded(a: argparse.Namespace) -> None:
    a.loaded_rss_mib = rss_mib()
    a.load_s = time.perf_counter() - a.started
    print(
        f"  {a.engine}: loaded and warmed up in {a.load_s:.1f} s, RSS {a.loaded_rss_mib:,.0f} MiB",
        file=sys.stderr,
        flush=True,
    )


def measure(a: argparse.Namespace) -> dict[str, Any]:
    """Run the engine once on ``a.streams`` prompts; the metrics, every stream's tokens, the RSS."""
    prompt_list = prompts(a.streams, a.prompt, _vocab(a.ir), a.seed)
    a.started, a.loaded_rss_mib, a.load_s = time.perf_counter(), None, None
    if a.engine in OV_ENGINES:
        streams, note = run_ov(a.engine, a.ir, prompt_list, a)
    elif a.engine == "sequential":
        streams, note = run_sequential(a.ir, prompt_list, a)
    else:
        streams, note = run_pool(a.engine, a.ir, prompt_list, a)
    result = stream_metrics(streams.times, streams.t0, streams.end)
    result["tokens_per_stream"] = counts = sorted({len(t) for t in streams.tokens})
    if counts != [a.new]:  # every stream must yield exactly G tokens, or the rates compare different work
        note = "; ".join(filter(None, [note, f"streams gave {counts[0]}..{counts[-1]} tokens, not {a.new}"]))
    result |= {"tokens": streams.tokens, "note": note, "load_s": a.load_s}
    return result | {"loaded_rss_mib": a.loaded_rss_mib, "peak_rss_mib": peak_rss_mib()}


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text}"[:300]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", choices=(*OV_ENGINES, "sequential", *POOL_ENGINES, "pool-fake"))
    p.add_argument("--ir", type=Path, required=True, help="the optimum-intel IR folder")
    p.add_argument("--onnx", type=Path, help="sequential, pool: the converted model")
    p.add_argument("--streams", type=int, required=True)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=20240607)
    p.add_argument(
        "--kv-cache-gb", type=int, default=1, help="OV GenAI's cache_size (and the pool's with --pool-same-kv)"
    )
    p.add_argument("--pool-same-kv", action="store_true")
    p.add_argument("--limit", type=int, default=0, help="sequential: run only the first K prompts")
    p.add_argument("--warmup", type=int, default=4, help="new tokens of the untimed first request (0: none)")
    a = p.parse_args(argv)
    try:
        result = measure(a)
    except Exception as exc:  # noqa: BLE001 - a failed engine is a row of the report, not a failed benchmark
        print(f"  {a.engine}: {_one_line(exc)}", file=sys.stderr, flush=True)
        result = {"error": _one_line(exc), "peak_rss_mib": peak_rss_mib()}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

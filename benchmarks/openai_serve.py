"""``ortstate serve DIR`` (OpenAI's API) under load, against the batcher it runs on, in process.

Starts ``ortstate serve MODEL_DIR`` on 127.0.0.1 and drives it with N concurrent streamed
``/v1/completions`` of the ``openai`` client's ``AsyncOpenAI`` (an asyncio load driver: each request
a prompt of ``--prompt`` random token ids, ``--new`` greedy tokens), then runs the same prompts on a
:class:`~ortstate.generate.ContinuousBatcher` in this process (``generate_many``). Prints, per
round: output tokens/s through HTTP and in process and their ratio (issue 30's target: >= 0.9x),
time to first token p50/p99 over HTTP. Then, for ``--history`` tokens of history: a second turn's
time to first token in a conversation (``X-Ortstate-Conversation``: only the new tokens are
prefilled) and the same request without one (the whole history prefilled), and their ratio (target:
at most 0.25). Writes ``openai-serve.json`` and ``openai-serve.md``.

Run it on a quiet machine (the server and the driver share its cores), on the real-size model::

    python -m benchmarks openai-serve PATH/TO/qwen2-0.5b-int4 --streams 32 --prompt 128 --new 64
    python -m benchmarks openai-serve models/llm/llama --streams 8 --prompt 16 --new 8 --history 96 --out /tmp/x
"""

from __future__ import annotations

import argparse
import asyncio
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
from openai import AsyncOpenAI

from benchmarks.common import RESULTS, ROOT, conditions, shown_path, start_run, write_results
from ortstate.generate import ContinuousBatcher

TARGET_RATIO = 0.9  # HTTP output tokens/s over the pool's own, issue 30
TARGET_SECOND_TURN = 0.25  # a conversation's second turn's time to first token over a whole prefill's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path, help="an optimum-intel LLM folder (ortstate serve's MODEL)")
    parser.add_argument("--streams", type=int, default=32, help="concurrent streamed completions (default 32)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per request (default 128)")
    parser.add_argument("--new", type=int, default=64, help="new tokens per request (default 64)")
    parser.add_argument(
        "--history", type=int, default=1000, help="tokens of history before a second turn (default 1000)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="threads of the server and the batcher (default 2)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results go (default benchmarks/results)")
    args = parser.parse_args(argv)
    run = start_run("openai-serve")
    server, url = _start(args.model_dir, args.streams, args.threads)
    rounds = []
    try:
        with ContinuousBatcher.from_dir(args.model_dir, slots=args.streams, threads=args.threads) as batcher:
            vocab = batcher.vocab_size or 256
            for k in range(args.rounds):
                rng = np.random.default_rng(k)
                prompts = [[int(t) for t in rng.integers(3, vocab, args.prompt)] for _ in range(args.streams)]
                http = asyncio.run(_drive(url, args.model_dir.resolve().name, prompts, args.new))
                tokens = http.pop("tokens")
                start = time.perf_counter()
                made = batcher.generate_many(prompts, args.new)
                seconds = time.perf_counter() - start
                pool = sum(map(len, made)) / seconds
                rounds.append(
                    {**http, "pool_tokens_per_s": round(pool, 1), "ratio": round(http["tokens_per_s"] / pool, 3)}
                )
                rounds[-1]["same_tokens"] = tokens == made
                history = [int(t) for t in rng.integers(3, vocab, args.history)]
                name = args.model_dir.resolve().name
                rounds[-1].update(asyncio.run(_second_turn(url, name, history, f"bench-{k}")))
                print(f"openai_serve: round {k + 1}/{args.rounds}: {rounds[-1]}", file=sys.stderr)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    data = {
        "model": shown_path(args.model_dir),
        "streams": args.streams,
        "prompt": args.prompt,
        "new": args.new,
        "history": args.history,
        "threads": args.threads,
        "rounds": rounds,
    }
    doc = write_results(args.out, "openai-serve", run, data, markdown)
    print(markdown(doc))
    ratio = median(r["ratio"] for r in rounds)
    print(f"{'PASS' if ratio >= TARGET_RATIO else 'MISS'} ratio: median {ratio:.3f} (target at least {TARGET_RATIO})")
    second = median(r["second_turn_ratio"] for r in rounds)
    word = "PASS" if second <= TARGET_SECOND_TURN else "MISS"
    print(f"{word} second turn: median {second:.3f} of a whole prefill's time to first token (target at most 0.25)")
    return 0


def _start(model_dir: Path, streams: int, threads: int) -> tuple[subprocess.Popen, str]:
    """The server on 127.0.0.1 (a free port), once it has printed its URL."""
    command = [sys.executable, "-m", "ortstate", "serve", str(model_dir), "--port", "0"]
    command += ["--max-batch", str(streams), "--threads", str(threads)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    with selectors.DefaultSelector() as sel:
        sel.register(server.stdout, selectors.EVENT_READ)
        line = server.stdout.readline() if sel.select(600) else ""
    found = re.search(r" on (http://127\.0\.0\.1:\d+) ", line)
    if not found:
        server.kill()
        raise SystemExit(f"openai_serve: the server did not start: {line!r}")
    return server, found.group(1)


async def _drive(url: str, model: str, prompts: list[list[int]], new: int) -> dict:
    """Every prompt streamed at once: output tokens/s, time to first token p50/p99 (ms), the tokens."""
    client = AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=3600)
    first: list[float] = []

    async def one(prompt: list[int]) -> list[int]:
        start = time.perf_counter()
        tokens: list[int] = []
        stream = await client.completions.create(
            model=model,
            prompt=prompt,
            max_tokens=new,
            temperature=0,
            stream=True,
            extra_body={"return_token_ids": True},
        )
        async for chunk in stream:
            ids = getattr(chunk.choices[0], "token_ids", None) if chunk.choices else None  # none on the finish
            if ids and not tokens:
                first.append(time.perf_counter() - start)
            tokens += ids or []
        return tokens

    try:
        start = time.perf_counter()
        tokens = await asyncio.gather(*(one(p) for p in prompts))
        seconds = time.perf_counter() - start
    finally:
        await client.close()
    first_ms = np.array(first) * 1e3
    return {
        "tokens_per_s": round(sum(map(len, tokens)) / seconds, 1),
        "ttft_p50_ms": round(float(np.percentile(first_ms, 50)), 1),
        "ttft_p99_ms": round(float(np.percentile(first_ms, 99)), 1),
        "tokens": tokens,
    }


async def _first_token_ms(client: AsyncOpenAI, model: str, prompt: list[int], headers: dict[str, str]) -> tuple:
    """A streamed completion of 8 greedy tokens: (time to its first token in ms, its tokens)."""
    start, first, tokens = time.perf_counter(), 0.0, []
    stream = await client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=8,
        temperature=0,
        stream=True,
        extra_headers=headers,
        extra_body={"return_token_ids": True},
    )
    async for chunk in stream:
        ids = getattr(chunk.choices[0], "token_ids", None) if chunk.choices else None
        if ids and not tokens:
            first = (time.perf_counter() - start) * 1e3
        tokens += ids or []
    return first, tokens


async def _second_turn(url: str, model: str, history: list[int], cid: str) -> dict:
    """A conversation's second turn after ``history``, and the same prompt without a conversation."""
    client = AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=3600)
    try:
        headers = {"X-Ortstate-Conversation": cid}
        _, reply = await _first_token_ms(client, model, history, headers)
        second = history + reply + [5, 6, 7, 8, 9, 10, 11, 12]
        kept, _ = await _first_token_ms(client, model, second, headers)
        whole, _ = await _first_token_ms(client, model, second, {})
    finally:
        await client.close()
    return {
        "second_turn_ttft_ms": round(kept, 1),
        "whole_history_ttft_ms": round(whole, 1),
        "second_turn_ratio": round(kept / whole, 3),
    }


def markdown(doc: dict[str, Any]) -> str:
    """Each round: HTTP against in process, and a second turn against a whole prefill."""
    data = doc["data"]
    lines = [
        f"# `ortstate serve` (OpenAI API): {data['streams']} streamed completions, prompt {data['prompt']}, "
        f"{data['new']} new, `{data['model']}`",
        "",
        conditions(doc) + f" Server and driver on the same cores, {data['threads']} threads each.",
        "",
        "| round | HTTP tokens/s | pool in process tokens/s | ratio | TTFT p50 ms | TTFT p99 ms | same tokens "
        f"| 2nd turn after {data['history']} TTFT ms | whole history TTFT ms | ratio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | :---: | ---: | ---: | ---: |",
    ]
    for k, r in enumerate(data["rounds"], 1):
        lines.append(
            f"| {k} | {r['tokens_per_s']:,} | {r['pool_tokens_per_s']:,} | {r['ratio']:.3f} | {r['ttft_p50_ms']} | "
            f"{r['ttft_p99_ms']} | {'yes' if r['same_tokens'] else 'no'} | {r['second_turn_ttft_ms']} | "
            f"{r['whole_history_ttft_ms']} | {r['second_turn_ratio']:.3f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

"""The LLM-streams benchmark (benchmarks/llm_streams*.py, issue 29): its metrics, verdicts and report on
made-up runs, and its concurrent driver on the tiny llama through the stand-in batcher.

The benchmark itself never runs in tests (real-size runs take GBs and minutes); what it concludes from
its numbers is checked here, because those PASS/MISS lines decide whether issue 29 is done.
"""

import argparse
import asyncio
import json
import time
from pathlib import Path

import pytest

from benchmarks import llm_streams_child as child
from benchmarks import llm_streams_report as report

ROOT = Path(__file__).resolve().parents[2]


def test_stream_metrics_pool_every_gap_and_time_from_the_first_request():
    times = [[1.0, 1.1, 1.3], [1.5, 1.6, 2.0]]  # two streams, requested at t0 = 0.5
    m = report.stream_metrics(times, 0.5)
    assert m["tokens"] == 6 and m["wall_s"] == pytest.approx(1.5)
    assert m["tokens_per_s"] == pytest.approx(4.0)
    assert m["ttft_p50_ms"] == pytest.approx(750.0)  # firsts 0.5 s and 1.0 s
    assert m["itl_p50_ms"] == pytest.approx(150.0)  # gaps 0.1 0.2 0.1 0.4


def test_stream_metrics_without_token_times_gives_the_aggregate_only():
    m = report.stream_metrics([[], []], 0.0, end=2.0)
    assert m["wall_s"] == 2.0 and m["ttft_p99_ms"] is None and m["itl_p99_ms"] is None


def test_queue_times_repeat_the_measured_streams_one_wall_later():
    times = [[1.0, 2.0], [3.0, 4.0]]  # the first 2 of 5 streams, run one after another from t0 = 0
    q = report.queue_times(times, 0.0, 5)
    assert q == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]
    assert report.stream_metrics(q, 0.0)["tokens_per_s"] == pytest.approx(1.0)


def _run(engine, n, rate, tokens, k=0, **extra):
    result = {"tokens_per_s": rate, "itl_p99_ms": 50.0, "peak_rss_mib": 1000.0, "tokens": tokens, **extra}
    return {
        "engine": engine,
        "streams": n,
        "round": k,
        "loadavg_before": [1.0] * 3,
        "loadavg_after": [1.5] * 3,
        "result": result,
    }


def _doc(runs, streams=(8, 32)):
    config = {"precision": "int4", "streams": list(streams), "engines": list(report.ENGINES), "pool_same_kv": False}
    return {"config": config, "runs": runs, "summary": report.summarize(runs), "tokens": report.compare_tokens(runs)}


def test_summarize_takes_medians_and_keeps_a_failure():
    runs = [_run("pool", 8, r, [], k) for k, r in enumerate((10.0, 30.0, 20.0))]
    runs.append({**_run("pool-int8", 8, 0, []), "result": {"error": "LookupError: no ContinuousBatcher"}})
    s = report.summarize(runs)
    assert s["pool"]["8"]["tokens_per_s"] == 20.0 and s["pool"]["8"]["ok_rounds"] == 3
    assert s["pool-int8"]["8"]["error"] == "LookupError: no ContinuousBatcher"


def test_compare_tokens_uses_the_reference_of_any_stream_count():
    ref8 = [[i, i] for i in range(8)]
    runs = [_run("sequential", 8, 40.0, ref8), _run("pool", 8, 200.0, [*ref8[:7], [0, 0]])]
    runs.append(_run("pool", 32, 300.0, [[i, i] for i in range(32)]))  # streams 8..31: no reference ran
    t = report.compare_tokens(runs)
    assert t["pool"]["8"] == {"equal": 7, "compared": 8, "first_differing": 7}
    assert t["pool"]["32"] == {"equal": 8, "compared": 8, "first_differing": None}


def test_targets_pass_miss_and_unmeasured():
    same = [[1, 2]] * 32
    runs = [_run(e, n, r, same) for e, n, r in [("ov-exact", 8, 100.0), ("pool", 8, 120.0), ("ov-exact", 32, 160.0)]]
    runs += [_run("pool", 32, 150.0, same), _run("sequential", 32, 40.0, same)]
    runs += [_run("pool-int8", 32, 310.0, same), _run("ov-default", 32, 300.0, same)]
    got = {t["target"].split(": ", 1)[1]: t["status"] for t in report.targets(_doc(runs))}
    assert got == {
        "pool tokens/s ≥ 1.0× OV GenAI exact at 8 streams": "PASS",
        "pool tokens/s ≥ 1.0× OV GenAI exact at 32 streams": "MISS",  # 150 < 160
        "pool tokens/s ≥ 1.0× OV GenAI exact at 64 streams": "n/a",
        "pool-int8 tokens/s ≥ 1.0× OV GenAI default at 32 streams": "PASS",
        "pool tokens/s ≥ 3.5× one stream at a time at 32 streams": "PASS",  # 3.75×
        "pool inter-token p99 ≤ 1.5× OV GenAI exact's at 32 streams": "PASS",
        "pool peak RSS ≤ 1.2× OV GenAI exact's (worst stream count; the pool's default KV budget)": "PASS",
        "every pool stream's tokens = a lone Generator's (one stream at a time)": "PASS",
    }


def test_markdown_shows_unavailable_engines_and_the_load(results_doc):
    runs = [_run("ov-exact", 8, 100.0, [[1]] * 8), _run("sequential", 8, 40.0, [[1]] * 8)]
    runs.append({**_run("pool", 8, 0, []), "result": {"error": "LookupError: no ContinuousBatcher"}})
    data = _doc(runs, (8,))
    data["config"] |= {"model_dir": "/m/int4", "prompt": 128, "new": 64, "threads": 2, "rounds": 1, "seed": 7}
    data["config"]["kv_cache_gb"] = {"8": 1}
    text = report.markdown(results_doc(data, "llm-streams", "llm-streams", images=["x.png"]))
    assert text.startswith("# LLM streams: int4 (llm-streams)\n\nRun 2026-01-01T00:00:00 (60 s); CPU X, 2 cores")
    assert "| 8 | ortstate ContinuousBatcher | not available: LookupError: no ContinuousBatcher |" in text
    assert "| 8 | ortstate, one stream at a time | 40.0 | 0.40× |" in text and "1.00 → 1.50" in text
    assert "(1/5/15 min) 0.50/0.40/0.30 before, 0.70/0.50/0.30 after" in text  # the run's, around every run
    assert "ortstate 0.1.0 (main 0123456789)" in text
    assert "![aggregate tokens/s vs streams](x.png)" in text


def test_prompts_are_seeded_in_the_vocabulary_and_the_same_whatever_the_count():
    few, many = child.prompts(2, 16, 50, seed=3), child.prompts(5, 16, 50, seed=3)
    assert many[:2] == few and all(0 <= t < 50 for p in many for t in p)
    assert child.prompts(2, 16, 50, seed=4) != few


def test_the_concurrent_driver_gets_every_token_of_a_lone_generator():
    from ortstate.generate import Generator

    llama = ROOT / "models" / "llm" / "llama"
    prompts = child.prompts(3, 6, 256, seed=1)
    lone = Generator.from_dir(llama)
    expected = [lone.generate(p, 5, stop_at_eos=False) for p in prompts]
    batcher = child.StandInBatcher.from_dir(llama, threads=1, int8_activations=False, kv_cache_bytes=None)
    streams = asyncio.run(child._drive(batcher, prompts, 5))
    assert streams.tokens == expected
    assert all(len(t) == 5 and t == sorted(t) and t[0] > streams.t0 for t in streams.times)


def test_ov_genai_cache_size_fits_every_stream_in_f32(tmp_path):
    from benchmarks import llm_streams

    assert llm_streams.kv_bytes_per_token(ROOT / "models" / "llm" / "llama") == 2 * 2 * 2 * 16 * 4
    qwen = {"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "hidden_size": 896}
    (tmp_path / "config.json").write_text(json.dumps(qwen))
    assert llm_streams.kv_bytes_per_token(tmp_path) == 24 * 2 * 2 * 64 * 4
    assert llm_streams.kv_cache_gb(tmp_path, 64, 192) == 1  # 352 MB
    assert llm_streams.kv_cache_gb(tmp_path, 512, 192) == 3  # 2.8 GB


def test_the_pool_is_asked_to_go_past_eos_in_its_own_words():
    class New:
        async def stream(self, prompt, max_new_tokens=16, *, stop_at_eos=True, **search): ...

    class Other:
        async def stream(self, prompt, max_new_tokens=16, **search): ...

    assert child._no_eos(New().stream) == {"stop_at_eos": False}
    assert child._no_eos(Other().stream) == {"ignore_eos": True}


def test_the_driver_and_run_pool_take_ortstates_continuous_batcher():
    """What llm_streams_child.run_pool does with the real class: from_dir with the benchmark's keywords
    (slots=N when it takes them), N concurrent streams past eos, every token a lone Generator's."""
    from ortstate.generate import ContinuousBatcher, Generator

    llama = ROOT / "models" / "llm" / "llama"
    prompts = child.prompts(4, 7, 256, seed=2)
    lone = Generator.from_dir(llama)
    expected = [lone.generate(p, 6, stop_at_eos=False) for p in prompts]
    a = argparse.Namespace(threads=1, kv_cache_gb=1, pool_same_kv=False, warmup=2, new=6, engine="pool")
    a.started = time.perf_counter()
    streams, note = child.run_pool("pool", llama, prompts, a)
    assert streams.tokens == expected and note == ""
    assert "slots" in child._parameters(ContinuousBatcher.from_dir)

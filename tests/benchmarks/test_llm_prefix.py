"""The LLM prefix-caching benchmark (benchmarks/llm_prefix*.py, issue 39 item 5): its workloads'
definitions, the engines' settings, the validity check of structured answers, and its verdicts and
report on made-up runs. The benchmark itself runs in tests only as the smoke run of test_suites.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks import llm_prefix
from benchmarks import llm_prefix_child as child
from benchmarks import llm_prefix_report as report
from ortstate.timing.llm_streams import Streams

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "models" / "llm" / "llama"
LLM = pytest.mark.skipif(sys.version_info < (3, 11), reason="onnxruntime 1.23 lacks GroupQueryAttention's causal")


class FakeRun:
    """An engine's run: each prompt answers ``new`` tokens (its length, then 1, 2, ...), the clock
    a fixed 10 ms to the first token and 1 ms between tokens; every call recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[list[int]], int]] = []

    def __call__(self, prompt_list: list[list[int]], new: int, **search: object) -> Streams:
        self.calls.append(([list(p) for p in prompt_list], new))
        out = Streams(len(prompt_list))
        for i, p in enumerate(prompt_list):
            out.tokens[i] = [len(p) + k for k in range(new)]
            out.times[i] = [out.t0 + 0.010 + 0.001 * k for k in range(new)]
        return out


def test_the_chat_is_a_plain_clients_each_turn_the_whole_history():
    """Issue 39's chat: turn t = turn t-1's prompt + its 32 generated tokens + 64 new ids (turn 8: 736)."""
    ids = child.workload_ids(child.SPEC, 1000, seed=5)
    run = FakeRun()
    got = child.run_chat(run, ids["chat"], child.SPEC["turn_new"])
    prompts = [p for (p,), _ in run.calls]
    assert [len(p) for p in prompts] == [64, 160, 256, 352, 448, 544, 640, 736]
    for t in range(1, 8):
        answer = [len(prompts[t - 1]) + k for k in range(32)]
        assert prompts[t] == prompts[t - 1] + answer + ids["chat"][t]
    assert prompts[0] == ids["chat"][0] and {new for _, new in run.calls} == {32}
    assert [t["prompt"] for t in got["turns"]] == [len(p) for p in prompts]
    assert [t["ttft_ms"] for t in got["turns"]] == pytest.approx([10.0] * 8)
    assert got["total_s"] == pytest.approx(8 * 0.041) and got["tokens"][0] == list(range(64, 96))


def test_the_shared_prompt_is_seen_once_then_every_request_at_once():
    spec = child.SPEC | {"requests": 3, "system": 20, "own": 4, "shared_new": 5}
    ids = child.workload_ids(spec, 50, seed=5)
    run = FakeRun()
    got = child.run_shared(run, ids["system"], ids["own"], spec["shared_new"])
    (warm, one), (timed, new) = run.calls
    assert warm == [ids["system"]] and one == 1 and new == 5
    assert timed == [ids["system"] + own for own in ids["own"]] and len({tuple(o) for o in ids["own"]}) == 3
    assert got["total_s"] == pytest.approx(0.014) and got["ttft_p50_ms"] == pytest.approx(10.0)


def test_workload_ids_are_seeded_in_the_vocabulary_and_share_no_prefix():
    ids = child.workload_ids(child.SPEC, 300, seed=9)
    assert ids == child.workload_ids(child.SPEC, 300, seed=9) and ids != child.workload_ids(child.SPEC, 300, seed=8)
    assert len(ids["system"]) == 1000 and [len(o) for o in ids["own"]] == [16] * 32
    flat = [t for key in ("chat", "own", "structured") for p in ids[key] for t in p] + ids["system"] + ids["warm"]
    assert all(0 <= t < 300 for t in flat)
    firsts = [ids["chat"][0][:4], ids["system"][:4], ids["warm"][:4], ids["structured"][0][:4]]
    assert len({tuple(f) for f in firsts}) == 4


@LLM
def test_structured_answers_are_decoded_and_validated():
    from ortstate.generate import Tokenizer

    check = child.schema_check(LLAMA)
    tokenizer = Tokenizer.from_dir(LLAMA)
    good = tokenizer.encode('{"name": "Ann", "age": 40, "tags": ["a"]}')
    assert check(good) == ""
    assert "ValidationError" in check(tokenizer.encode('{"name": "Ann", "age": 400, "tags": []}'))
    assert "JSONDecodeError" in check(good[:-1])


@LLM
@pytest.mark.parametrize("has_option", [True, False])
def test_the_ortstate_engines_set_prefix_cache_as_a_user_would(has_option, monkeypatch):
    """Through ``from_dir``'s own ``prefix_cache`` when it has one; without it the cache engine is
    refused and the cache-less one runs without the option (a note says so)."""
    import ortstate.generate

    real = ortstate.generate.ContinuousBatcher
    seen: list[dict] = []

    class Batcher(real):  # type: ignore[misc, valid-type]
        if has_option:

            @classmethod
            def from_dir(cls, model_dir, *, prefix_cache: bool, **kwargs):  # type: ignore[override]
                seen.append(kwargs | {"prefix_cache": prefix_cache})
                return real.from_dir(model_dir, **kwargs)

        else:

            @classmethod
            def from_dir(cls, model_dir, **kwargs):  # type: ignore[override]
                seen.append(kwargs)
                return real.from_dir(model_dir, **kwargs)

    monkeypatch.setattr(ortstate.generate, "ContinuousBatcher", Batcher)
    a = type("Args", (), {"threads": 1, "spec": child.SPEC | {"batched": 16}})()
    for caching in (True, False):
        if not has_option and caching:
            with pytest.raises(child.Unavailable, match="^this ortstate has no prefix caching$"):
                child.ortstate_run(LLAMA, a, caching)
            continue
        run, note = child.ortstate_run(LLAMA, a, caching)
        assert len(run([[5, 6, 7]], 3).tokens[0]) == 3
        assert note == ("" if has_option else "this ortstate has no prefix_cache option: no cache to turn off")
    expected = {"threads": 1, "int8_activations": False, "max_num_batched_tokens": 16}
    assert seen == ([expected | {"prefix_cache": c} for c in (True, False)] if has_option else [expected])


def test_openvino_genai_gets_the_exact_config_and_the_scheduler_fields(monkeypatch):
    genai = pytest.importorskip("openvino_genai")
    made = []
    monkeypatch.setattr(genai, "ContinuousBatchingPipeline", lambda *args: made.append(args) or "pipe")
    a = type("Args", (), {"threads": 2, "kv_cache_gb": 3, "spec": child.SPEC})()
    child.ov_run(LLAMA, a, caching=True)
    ((folder, scheduler, device, props),) = made
    assert (folder, device, props) == (str(LLAMA), "CPU", child.OV_EXACT | {"INFERENCE_NUM_THREADS": 2})
    assert (scheduler.enable_prefix_caching, scheduler.max_num_batched_tokens, scheduler.cache_size) == (True, 256, 3)
    from ortstate.timing.llm_streams import openvino_genai_pipeline

    with pytest.raises(ValueError, match="SchedulerConfig has no field 'enable_prefix_cache'"):
        openvino_genai_pipeline(LLAMA, 1, 1, None, {"enable_prefix_cache": True})


# -- the verdicts and the report, on made-up runs ----------------------------------------------------
def _run(workload, engine, k=0, **result):
    return {
        "workload": workload,
        "engine": engine,
        "round": k,
        "loadavg_before": [1.0] * 3,
        "loadavg_after": [1.5] * 3,
        "result": result,
    }


def _chat(engine, ttfts, total, tokens, k=0):
    turns = [{"prompt": 64 + 96 * i, "ttft_ms": t, "ms": t + 100} for i, t in enumerate(ttfts)]
    return _run(
        "chat", engine, k, turns=turns, total_s=total, ttft_p50_ms=sorted(ttfts)[len(ttfts) // 2], tokens=tokens
    )


def _data(runs):
    config = {"model": "m", "model_dir": "~/m", "threads": 2, "rounds": 1, "seed": 7, "spec": child.SPEC}
    config |= {"engines": child.ENGINES, "kv_cache_gb": {"chat": 2, "shared": 2, "structured": 2}}
    return {"config": config, "runs": runs, "summary": report.summarize(runs), "tokens": report.compare_cache(runs)}


RUNS = [
    _chat("ortstate", [300, 200, 200, 200, 200, 200, 200, 300], 2.0, [[1], [2]]),
    _chat("ortstate", [300, 200, 200, 200, 200, 200, 200, 100], 3.0, [[1], [2]], k=1),
    _chat("ortstate-nocache", [300, 600, 900, 1200, 1500, 1800, 2100, 2400], 12.0, [[1], [3]]),
    _chat("ov-cache", [250, 250, 250, 250, 250, 250, 250, 310], 2.4, [[1], [3]]),
    _run("shared", "ortstate", total_s=10.0, ttft_p50_ms=900.0, tokens=[[4], [5]]),
    _run("shared", "ortstate-nocache", total_s=100.0, ttft_p50_ms=50_000.0, tokens=[[4], [5]]),
    _run("shared", "ov-cache", total_s=12.9, ttft_p50_ms=800.0, tokens=[[4], [5]]),
    _run("shared", "ov-nocache", error="openvino-genai is not installed (No module named 'openvino_genai')"),
    _run("structured", "ortstate", total_s=4.0, tokens_per_s=100.0, tokens=[]),
    _run("structured", "ortstate-schema", total_s=4.0, tokens_per_s=95.0, answers=32, valid=31, tokens=[]),
]


def test_summarize_takes_medians_per_turn_and_keeps_a_failure():
    s = report.summarize(RUNS)
    assert s["chat"]["ortstate"]["turn_ttft_ms"][-1] == 200.0 and s["chat"]["ortstate"]["total_s"] == 2.5
    assert s["chat"]["ortstate"]["ok_rounds"] == 2 and s["chat"]["ortstate"]["turn_prompt"][:2] == [64, 160]
    assert s["shared"]["ov-nocache"]["error"].startswith("openvino-genai is not installed")


def test_compare_cache_counts_the_answers_equal_to_the_same_engine_without_its_cache():
    t = report.compare_cache(RUNS)
    assert t["ortstate"] == {"chat": {"equal": 2, "compared": 4}, "shared": {"equal": 2, "compared": 2}}
    assert set(t) == {"ortstate"}  # ov-cache's counterparts: no chat run, a failed shared one


def test_targets_pass_miss_and_unmeasured():
    got = {t["target"]: (t["status"], t["detail"]) for t in report.targets(_data(RUNS))}
    shared = "32 requests sharing a 1,000-token system prompt"
    assert got == {
        "chat: turn-8 TTFT with the cache ≤ 0.15× without": ("PASS", "200 vs 2,400 ms = 0.08×"),
        f"{shared}: total with the cache ≤ 0.12× without": ("PASS", "10.00 vs 100.00 s = 0.10×"),
        "chat (8 turns): TTFT p50 ≤ OpenVINO GenAI's with its prefix caching": ("PASS", "200 vs 250 ms = 0.80×"),
        "chat (8 turns): total ≤ OpenVINO GenAI's with its prefix caching": ("MISS", "2.50 vs 2.40 s = 1.04×"),
        f"{shared}: TTFT p50 ≤ OpenVINO GenAI's with its prefix caching": ("MISS", "900 vs 800 ms = 1.12×"),
        f"{shared}: total ≤ OpenVINO GenAI's with its prefix caching": ("PASS", "10.00 vs 12.90 s = 0.78×"),
        "structured output: tokens/s with a schema ≥ 0.9× unconstrained at 32 streams": (
            "PASS",
            "95.0 vs 100.0 tok/s = 0.95×",
        ),
        "structured output: every answer valid JSON of its schema": ("MISS", "31 of 32 (the worst round)"),
        "ortstate's tokens with the cache = without (chat turns and shared requests, every round)": (
            "MISS",
            "4 of 6 equal",
        ),
    }
    nothing = {t["target"]: t["status"] for t in report.targets(_data([]))}
    assert set(nothing.values()) == {"n/a"} and len(nothing) == 9


def test_markdown_shows_every_turn_the_unavailable_engines_and_the_anchor(results_doc):
    text = report.markdown(results_doc(_data(RUNS), "llm-prefix", "llm-prefix", images=["llm-prefix.png"]))
    assert text.startswith("# LLM prefix caching: m (llm-prefix)\n\nRun 2026-01-01T00:00:00 (60 s); CPU X, 2 cores")
    assert "| engine | turn 1 (64) | turn 2 (160) |" in text and "| turn 8 (736) | total s |" in text
    row = "| ortstate ContinuousBatcher, prefix caching | 300 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 2.50 | 2/4 |"
    assert row in text and "1.00 → 1.50; 1.00 → 1.50 |" in text
    assert (
        "| OpenVINO GenAI CB, exact config, no prefix caching | not available: openvino-genai is not installed" in text
    )
    assert "| ortstate ContinuousBatcher, json_schema | 4.00 |" in text and "| 31/32 |" in text
    assert "last-turn TTFT 310 ms with caching" in text and "(anchor: turn 8 310 ms / 2,505 ms)" in text
    assert text.rstrip().endswith("![TTFT per turn, with and without prefix caching](llm-prefix.png)")


def test_the_plot_draws_what_ran(tmp_path):
    pytest.importorskip("matplotlib")
    llm_prefix.plot(_data(RUNS), tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""``ortstate serve`` for an LLM folder: ``/metrics`` read with Prometheus' own parser after real
requests (counts equal the answers' usage exactly, one latency per token or answer), and the
access log's line per request."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
from oracle import REPO
from prometheus_client.parser import text_string_to_metric_families

from ortstate.generate import Tokenizer
from ortstate.serve import LlmServeConfig, serve_llm_in_thread

LLAMA = REPO / "models" / "llm" / "llama"
TOKEN = "s3cret"


def scrape(url: str, token: str | None = TOKEN) -> dict[tuple[str, tuple], float]:
    """Every sample of ``/metrics``: (name, its labels but model_name) -> value."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url + "/metrics", headers=headers), timeout=30) as reply:
        assert reply.headers["content-type"].startswith("text/plain")
        text = reply.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            assert s.labels.get("model_name") == "llama", s
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "model_name"))
            samples[s.name, labels] = s.value
    return samples


def test_metrics_count_what_the_answers_say(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ortstate.serve.access")
    with serve_llm_in_thread(LlmServeConfig(LLAMA, 4, slots=2, token=TOKEN)) as running:
        client = openai.OpenAI(base_url=running.url + "/v1", api_key=TOKEN, max_retries=0)
        every = {"temperature": 0, "extra_body": {"ignore_eos": True}}  # each answer exactly max_tokens
        done = [
            client.completions.create(model="llama", prompt="Hello", max_tokens=5, **every),
            client.completions.create(
                model="llama", prompt=[1, 5, 7, 9], max_tokens=3, n=2, seed=1, **{**every, "temperature": 0.8}
            ),
            client.chat.completions.create(
                model="llama", messages=[{"role": "user", "content": "hi"}], max_tokens=4, **every
            ),
        ]
        conversation = {"X-Ortstate-Conversation": "c1"}
        first = client.completions.create(
            model="llama", prompt="Once", max_tokens=2, extra_headers=conversation, **every
        )
        again = "Once" + first.choices[0].text + " upon a time"  # goes on from the first turn
        turns = [
            first,
            client.completions.create(model="llama", prompt=again, max_tokens=2, extra_headers=conversation, **every),
        ]
        got = scrape(running.url)
        budget = running.service.batcher.pool.budget.positions
        client.delete("/conversations/c1", cast_to=object)
        emptied = scrape(running.url)
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(running.url, token=None)
        assert refused.value.code == 401
    answers = done + turns
    choices = [c for a in answers for c in a.choices]
    assert got["vllm:prompt_tokens_total", ()] == sum(a.usage.prompt_tokens for a in answers)
    assert got["vllm:generation_tokens_total", ()] == sum(a.usage.completion_tokens for a in answers)
    assert got["vllm:prefix_cache_queries_total", ()] == sum(a.usage.prompt_tokens for a in answers)
    cached = sum(a.usage.prompt_tokens_details.cached_tokens for a in answers)
    assert cached > 0 and got["vllm:prefix_cache_hits_total", ()] == cached
    assert got["vllm:e2e_request_latency_seconds_count", ()] == len(answers)
    assert got["vllm:time_to_first_token_seconds_count", ()] == len(choices)
    tokens = [2 * 3, 5, 4, 2, 2]  # each answer's tokens, its choices together
    assert sum(tokens) == got["vllm:generation_tokens_total", ()]
    gaps = 4 + 2 + 2 + 3 + 1 + 1  # a choice's tokens but its first
    assert got["vllm:inter_token_latency_seconds_count", ()] == gaps
    reasons = {"stop": 0, "length": 0, "tool_calls": 0}  # each there from the start, as vLLM's
    for c in choices:
        reasons[c.finish_reason] = reasons.get(c.finish_reason, 0) + 1
    assert {k[1][0][1]: v for k, v in got.items() if k[0] == "vllm:request_success_total"} == reasons
    assert got["vllm:num_requests_running", ()] == got["vllm:num_requests_waiting", ()] == 0
    last = turns[-1].usage  # the conversation's cache holds its last turn, but the token that ended it
    # and the prefix cache the last other answer's stream (its prompt and answer but its last token):
    # of 2 rows, one ran the conversation's turn; the streams before were evicted for it
    cache = done[-1].usage.prompt_tokens + done[-1].usage.completion_tokens - 1
    conversation = last.prompt_tokens + last.completion_tokens - 1
    assert got["vllm:kv_cache_usage_perc", ()] == (conversation + cache) / budget
    assert emptied["vllm:kv_cache_usage_perc", ()] == cache / budget
    lines = [r.getMessage() for r in caplog.records if r.name == "ortstate.serve.access"]
    want = [
        f"POST /v1/{'chat/' if a.object == 'chat.completion' else ''}completions 200 prompt "
        f"{a.usage.prompt_tokens} cached {a.usage.prompt_tokens_details.cached_tokens or 0} "
        f"generated {a.usage.completion_tokens}"
        for a in answers
    ]
    assert [line.rsplit(" ", 2)[0] for line in lines[: len(answers)]] == want
    assert lines[len(answers)].startswith("GET /metrics 200 ") and lines[-1].startswith("GET /metrics 401 ")
    assert lines[len(answers) + 1].startswith("DELETE /v1/conversations/c1 200 ")
    assert all(line.endswith(" ms") for line in lines)


def test_the_gauges_count_requests_running_and_waiting() -> None:
    """One row: while a long answer runs, a second request waits for it (its gauge read once the
    batcher counts it, a counter waited on, not a time); both 0 once they are answered. The first
    answer may end before the second is counted on a slow machine: then the pair is made again (at
    most 5 times), and the gauges must have been seen at (1, 1) once."""
    with serve_llm_in_thread(LlmServeConfig(LLAMA, 4, slots=1)) as running:
        client: Any = openai.OpenAI(base_url=running.url + "/v1", api_key="none", max_retries=0)
        long = {"prompt": [1], "max_tokens": 127, "temperature": 0, "extra_body": {"ignore_eos": True}}
        seen = None
        for _ in range(5):
            first = client.completions.create(model="llama", stream=True, **long)
            next(iter(first))  # it runs
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                second = pool.submit(
                    client.completions.create, model="llama", prompt=[1, 2], max_tokens=2, temperature=0
                )
                while running.service.batcher.stats()["waiting"] == 0 and not second.done():
                    time.sleep(0.001)
                during = scrape(running.url, None)
                gauges = (during["vllm:num_requests_running", ()], during["vllm:num_requests_waiting", ()])
                counted = not second.done() and gauges[1] == 1  # (seen between the two answers' ticks: again)
                assert [c.choices[0].finish_reason for c in first][-1] == "length"
                assert second.result().usage.completion_tokens == 2
            if counted and gauges[0] == 1:
                seen = gauges
                break
        assert seen == (1, 1)
        after = scrape(running.url, None)
    assert (after["vllm:num_requests_running", ()], after["vllm:num_requests_waiting", ()]) == (0, 0)


def test_the_access_log_is_quiet_when_told(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ortstate.serve.access")
    with serve_llm_in_thread(LlmServeConfig(LLAMA, 2, slots=1, access_log=False)) as running:
        with urllib.request.urlopen(running.url + "/health", timeout=30) as reply:
            assert reply.status == 200
    assert [r for r in caplog.records if r.name == "ortstate.serve.access"] == []


def test_two_servers_in_one_process_count_apart() -> None:
    with (
        serve_llm_in_thread(LlmServeConfig(LLAMA, 2, slots=1)) as one,
        serve_llm_in_thread(LlmServeConfig(LLAMA, 2, slots=1)) as other,
    ):
        client: Any = openai.OpenAI(base_url=one.url + "/v1", api_key="none", max_retries=0)
        client.completions.create(model="llama", prompt=[1, 2], max_tokens=2, temperature=0)
        assert scrape(one.url, None)["vllm:generation_tokens_total", ()] == 2
        untouched = scrape(other.url, None)
    # every series is there before the first request, at 0 (as vLLM's), a histogram's buckets too
    assert {name for (name, _), value in untouched.items() if value == 0} >= {
        *(
            f"vllm:{n}_total"
            for n in ("prompt_tokens", "generation_tokens", "prefix_cache_queries", "prefix_cache_hits")
        ),
        *(f"vllm:{n}_seconds_count" for n in ("time_to_first_token", "inter_token_latency", "e2e_request_latency")),
        "vllm:request_success_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    }
    assert untouched["vllm:time_to_first_token_seconds_bucket", (("le", "+Inf"),)] == 0
    assert untouched["vllm:generation_tokens_total", ()] == 0


def test_the_docs_watch_it_lines() -> None:
    """docs/serve-llm.md's "Watch it" curl lines, run against a server of models/llm/llama."""
    section = (REPO / "docs" / "serve-llm.md").read_text(encoding="utf-8").split("## Watch it")[1]
    lines = section.split("```bash\n")[1].split("```")[0].splitlines()
    with serve_llm_in_thread(LlmServeConfig(LLAMA, 2, slots=1)) as running:
        done = [
            subprocess.run(
                ["bash", "-c", line.replace("http://127.0.0.1:8000", running.url)],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            for line in lines
        ]
    assert done[0] == 'vllm:generation_tokens_total{model_name="llama"} 0.0\n'
    tokens = Tokenizer.from_dir(LLAMA).encode("Hello")
    assert json.loads(done[1]) == {"count": len(tokens), "max_model_len": 128, "tokens": tokens, "token_strs": None}

"""``GET /metrics``: the LLM server's figures in Prometheus' text format, under vLLM's names (a
dashboard made for vLLM reads them), each labelled with the served ``model_name``.

- Gauges, read as they are scraped: ``vllm:num_requests_running`` (generating), ``vllm:num_requests_waiting``
  (taken, waiting for a row or the KV budget), ``vllm:kv_cache_usage_perc`` (the share of the KV
  budget the caches hold, 0 to 1).
- Counters: ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total`` (what the answers' usage
  counts), ``vllm:request_success_total`` by ``finished_reason``, ``vllm:prefix_cache_queries_total``
  and ``vllm:prefix_cache_hits_total`` (prompt tokens looked up, and those a cache held: a
  conversation's or the prefix cache's, ``usage.prompt_tokens_details.cached_tokens``).
- Histograms (vLLM's buckets), per answer: ``vllm:time_to_first_token_seconds`` and
  ``vllm:e2e_request_latency_seconds`` (from the request's arrival), ``vllm:inter_token_latency_seconds``
  (between a choice's tokens).

Each server has its registry (several in one process do not mix), and nothing is computed on the
engine's path: tokens are timed as the answer takes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["CONTENT_TYPE", "ServerMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
         80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_E2E = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
        960.0, 1920.0, 7680.0)  # fmt: skip
_REASONS = ("stop", "length", "tool_calls")  # an answer's finish_reason (OpenAI's)


class ServerMetrics:
    """The figures of one server of ``model_name``; ``now()`` reads the batcher's moment values
    (``running``, ``waiting``, ``kv_usage``: :meth:`~ortstate.generate.ContinuousBatcher.stats`)."""

    def __init__(self, model_name: str, now: Callable[[], dict[str, float]]) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        reg = self.registry
        # Each series is made now, at 0 (as vLLM's are): a scrape before the first request has them
        # all, and a rate() over a counter's first increase counts it.

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, ["model_name"], registry=reg).labels(model_name)

        def histogram(name: str, doc: str, buckets: Sequence[float]) -> Any:
            return Histogram(name, doc, ["model_name"], buckets=buckets, registry=reg).labels(model_name)

        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Generated tokens.")
        self.queries = counter("vllm:prefix_cache_queries", "Prompt tokens looked up in a cache.")
        self.hits = counter("vllm:prefix_cache_hits", "Prompt tokens a cache held.")
        self.success = Counter(
            "vllm:request_success", "Requests answered whole.", ["model_name", "finished_reason"], registry=reg
        )
        for reason in _REASONS:
            self.success.labels(model_name, reason)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "From arrival to the first token.", _TTFT)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Between two tokens of a choice.", _ITL)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "From arrival to the answer's end.", _E2E)
        reg.register(_Moment(model_name, now))

    def answered(self, choices: Sequence[Generation], arrived: float) -> None:
        """Count an answer of ``choices`` (one, or ``n``) to a request that arrived at ``arrived``
        (``time.monotonic()``), however it ended (its tokens so far counted)."""
        if not choices:
            return
        first = choices[0]
        self.prompt_tokens.inc(len(first.prompt))
        self.queries.inc(len(first.prompt))
        self.hits.inc(first.cached)
        self.generation_tokens.inc(sum(len(c.tokens) for c in choices))
        for choice in choices:
            if choice.first_at is not None:
                self.ttft.observe(choice.first_at - arrived)
            for gap in choice.gaps:
                self.itl.observe(gap)
            if choice.finish is not None:
                self.success.labels(self.model_name, str(choice.finish_reason)).inc()
        self.e2e.observe(time.monotonic() - arrived)

    def text(self) -> bytes:
        """Every figure, in Prometheus' text format."""
        return generate_latest(self.registry)


class _Moment:
    """The gauges, read as they are scraped."""

    def __init__(self, model_name: str, now: Callable[[], dict[str, float]]) -> None:
        self.model_name, self.now = model_name, now

    def collect(self) -> Iterator[Any]:
        values = self.now()
        for name, key, doc in (
            ("vllm:num_requests_running", "running", "Requests generating."),
            ("vllm:num_requests_waiting", "waiting", "Requests waiting for a row or the KV budget."),
            ("vllm:kv_cache_usage_perc", "kv_usage", "The share of the KV budget in use (1 = all)."),
        ):
            family = GaugeMetricFamily(name, doc, labels=["model_name"])
            family.add_metric([self.model_name], float(values[key]))
            yield family

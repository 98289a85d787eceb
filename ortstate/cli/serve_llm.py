"""``ortstate serve LLM_DIR``: an optimum-intel LLM folder served with OpenAI's API over a
:class:`~ortstate.generate.ContinuousBatcher` (what ``ortstate serve`` does when MODEL is a folder)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ServeError, UsageError
from .command import EXIT_OK
from .serving import EXIT_STREAMS_LOST, ray_installed, run_on_ray, serve_here, usage

if TYPE_CHECKING:
    from ..serve.openai.config import LlmServeConfig
    from ..serve.openai.service import LlmService

__all__ = ["LLM_HELP", "byte_count", "serve_llm"]

LLM_HELP = """\
An LLM (MODEL an optimum-intel export folder, decoder-only, with its tokenizer.json and chat
template): served with OpenAI's API (to start: docs/serve-llm.md; every rule: docs/openai.md),
every request generating on one ContinuousBatcher (--max-batch requests decoding in one run per
tick, default 64; up to --max-streams requests at once, one more is answered 503):
  GET  /v1/models                  the model, its id the folder's name (or --model-name)
  POST /v1/completions             prompt: text or token ids
  POST /v1/chat/completions        messages through the folder's chat template
each with "stream": true (server-sent events, a chunk per token, then [DONE]; "stream_options":
{"include_usage": true} adds a usage chunk) or without; max_tokens / max_completion_tokens,
temperature (0: greedy), top_p, top_k, min_p, seed, stop (strings, left out of the text), n
(choices, when sampling), presence, frequency and repetition penalties, logit_bias, logprobs
(completions 0-5; chat: true, with top_logprobs 0-20: log-softmax of the raw logits);
response_format (json_object, json_schema) and, in a chat, tools with a tool_choice naming one of
them (docs/structured-output.md). And vLLM's: GET /metrics (its figures under vLLM's vllm:*
names, Prometheus' text format), POST /tokenize {"prompt"} or {"messages"} -> {"count",
"max_model_len", "tokens", "token_strs"}, POST /detokenize {"tokens"} -> {"prompt"}.
Errors have OpenAI's body {"error": {"message", "type", "param", "code"}}: 400 a bad request
(malformed JSON, a bad field, a prompt over the context length), 401 no or a wrong token, 403 a
web page's request (its Origin another site's, or a Host not loopback without a token), 404
another model, 408 a request too slow, 415 a body not sent as application/json (curl -d: add
-H 'Content-Type: application/json'), 503 full (with Retry-After), 500 an internal error (its
message a log id; the traceback in the server's log under that id). Each request is a line on
stderr once answered (method, path, status, prompt/cached/generated tokens, ms; --no-access-log:
none). ONNX Runtime runs on the physical cores the process may use (--threads sets it), a request
reaches the model's context (--max-model-len sets less), all share a quarter of the machine's
memory for KV caches (--kv-cache-bytes); the start line says all three. A
client that goes away cancels its request. The same --token, loopback, Host, Origin
(--allow-origin) and connection rules. A body
is JSON nested 64 deep at most, numbers of 100 characters at most, no lone surrogate; a request is
tokenized once, off the event loop, and a text prompt too long for the context by its length
alone is refused before it is tokenized (docs/openai.md).

conversations (an ortstate extension): a request with the header "X-Ortstate-Conversation: ID"
keeps conversation ID's KV cache between turns, so the next turn prefills only what its prompt adds
(usage.prompt_tokens_details.cached_tokens says how many were reused); a prompt that does not start
with what the cache holds is prefilled whole. --max-conversations are kept in memory (one more parks
or forgets the least recently used); --conversation-ttl S removes one idle for S seconds (kept or
parked); DELETE /v1/conversations/ID removes one at once (404 unknown, 409 a request runs on it).
With --state-dir: each turn's token ids are logged and synced there before its reply ends, so a
server killed (SIGKILL, a crash) and started again on it continues every answered turn exactly
(the lost cache prefilled again from those ids); conversations idle for --idle-park seconds are
parked there, all of them on SIGTERM or Ctrl-C (exit 3 if one cannot be), and a server started
again on it continues them. DIR holds at most --max-parked-bytes (logs included): past it, the
least recently used parked conversations are removed, one log line each.

With --ray: --replicas replicas on Ray Serve, each with a batcher of its own, routed by the
conversation header (Ray Serve's consistent-hash router; a request without one goes to any
replica); they share --state-dir (required): each turn's conversation is parked there as it ends
and continued by whichever replica the next turn reaches, so a conversation survives its replica
being removed, replaced or killed. Streamed answers go through Ray's HTTP proxy."""


def serve_llm(args: argparse.Namespace, folder: Path) -> int:
    """Serve an optimum-intel LLM folder with OpenAI's API until SIGTERM or Ctrl-C."""
    if args.durable:
        raise UsageError(
            "--durable logs each stream's whole state at every step, and an LLM's KV cache grows with every "
            "token: an LLM folder is served without it (with --state-dir, conversations are parked at a clean stop)"
        )
    config = _config(args, folder)
    _print_access_log(config.access_log)
    if args.ray:
        return _ray(args, config)
    from ..serve.openai.server import build

    def says(service: LlmService, url: str) -> str:
        budget = service.batcher.pool.budget  # as vLLM says its KV cache: in tokens, all requests together
        return (
            f"ortstate serve: {folder} as model '{service.model_id}' on {url} (OpenAI API at /v1, {config.slots} "
            f"requests generating at once, {service.threads} threads, max model len {service.context}, "
            f"KV cache {_size(budget.bytes)} = {budget.positions:,} positions; SIGTERM or Ctrl-C stops it)"
        )

    return _stopped(config, serve_here(config, build, says))


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to ``sys.stderr`` as it is when a line is logged (not when it was made)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _print_access_log(on: bool) -> None:
    """The access log's lines on stderr (``on``), as ``ortstate serve: ...`` lines are on stdout;
    once per process however often the command runs in it, and off again when told."""
    from ..serve.openai.access_log import access_logger

    logger = access_logger()
    mine = [h for h in logger.handlers if isinstance(h, _Stderr)]
    if not on:
        for handler in mine:
            logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        return
    if not mine:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("ortstate serve: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def byte_count(text: str, option: str) -> int:
    """``text`` as a positive number of bytes: digits, or digits and K, M, G or T (powers of 1024).

    Raises:
        UsageError: anything else, naming ``option``.
    """
    digits, unit = (text[:-1], text[-1].upper()) if text[-1:].isalpha() else (text, "")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(unit)
    if scale is None or not digits.isascii() or not digits.isdigit() or int(digits) < 1:
        raise UsageError(f"{option} must be a positive number of bytes (e.g. 2000000000, 512M or 10G), got {text!r}")
    return int(digits) * scale


def _config(args: argparse.Namespace, folder: Path) -> LlmServeConfig:
    """The LLM server's config from the command line (it checks every setting: exit 2)."""
    from ..serve.openai.config import LlmServeConfig

    bound = None if args.max_parked_bytes is None else byte_count(args.max_parked_bytes, "--max-parked-bytes")
    kv = None if args.kv_cache_bytes is None else byte_count(args.kv_cache_bytes, "--kv-cache-bytes")
    try:
        return LlmServeConfig(
            folder,
            max_requests=args.max_streams,
            slots=args.max_batch,
            token=args.token,
            allow_origins=tuple(args.allow_origin or ()),
            model_name=args.model_name,
            threads=args.threads,
            kv_cache_bytes=kv,
            prefix_cache=not args.no_prefix_cache,
            max_model_len=args.max_model_len,
            access_log=not args.no_access_log,
            max_body_bytes=args.max_message_bytes,
            state_dir=args.state_dir,
            max_conversations=args.max_conversations,
            idle_park=args.idle_park,
            shared=args.ray,
            max_parked_bytes=bound,
            conversation_ttl=args.conversation_ttl,
            host=args.host,
            port=args.port,
        )
    except ServeError as exc:
        raise usage(exc) from None


def _stopped(config: LlmServeConfig, service: LlmService) -> int:
    """Say the server stopped, and where its conversations were parked; the exit status."""
    parked = service.conversations.parked
    print(
        f"ortstate serve: stopped; {parked} conversations parked in {config.state_dir}"
        if config.state_dir
        else "ortstate serve: stopped",
        flush=True,
    )
    if service.lost:  # each named in the log already
        print(
            f"ortstate: error: {len(service.lost)} conversations could not be parked: their caches are lost, their "
            "answered turns stay in the log of turns, recovered by the next server on the state directory",
            file=sys.stderr,
        )
        return EXIT_STREAMS_LOST
    return EXIT_OK


def _ray(args: argparse.Namespace, config: LlmServeConfig) -> int:
    """Serve the folder on Ray Serve, routed by conversation id, until SIGTERM or Ctrl-C."""
    ray_installed()
    from ..serve.openai.ray_deployment import ROUTING_ENVIRONMENT, make_llm_app

    def ready(url: str) -> None:
        print(
            f"ortstate serve: {config.folder} on {url} (OpenAI API at /v1, Ray Serve, {args.replicas} replicas, "
            f"conversations parked in {config.state_dir}; SIGTERM or Ctrl-C stops it)",
            flush=True,
        )

    run_on_ray(config, make_llm_app, args.replicas, ready, ROUTING_ENVIRONMENT)  # Ray's proxy reads it
    print(f"ortstate serve: stopped; conversations parked in {config.state_dir}", flush=True)
    return EXIT_OK


def _size(nbytes: int) -> str:
    """``nbytes`` in GiB, or MiB below one (a small --kv-cache-bytes read "0.00 GiB")."""
    return f"{nbytes / (1 << 30):.2f} GiB" if nbytes >= 1 << 30 else f"{nbytes / (1 << 20):.2f} MiB"

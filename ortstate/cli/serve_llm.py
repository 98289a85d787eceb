"""``ortstate serve LLM_DIR``: an optimum-intel LLM folder served with OpenAI's API over a
:class:`~ortstate.generate.ContinuousBatcher` (what ``ortstate serve`` does when MODEL is a folder)."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ServeError, UsageError
from .command import EXIT_OK

if TYPE_CHECKING:
    from ..serve.openai.service import LlmService

__all__ = ["EXIT_STREAMS_LOST", "LLM_HELP", "byte_count", "serve_llm"]

EXIT_STREAMS_LOST = 3  # stopped, but streams or conversations that could not be parked (a full disk) are lost

LLM_HELP = """\
An LLM (MODEL an optimum-intel export folder, decoder-only, with its tokenizer.json and chat
template): served with OpenAI's API (docs/serve.md), every request generating on one
ContinuousBatcher (--max-batch requests decoding in one run per tick, default 64; up to
--max-streams requests at once, one more is answered 503):
  GET  /v1/models                  the model, its id the folder's name (or --model-name)
  POST /v1/completions             prompt: text or token ids
  POST /v1/chat/completions        messages through the folder's chat template
each with "stream": true (server-sent events, a chunk per token, then [DONE]; "stream_options":
{"include_usage": true} adds a usage chunk) or without; max_tokens / max_completion_tokens,
temperature (0: greedy), top_p, seed, stop (strings, left out of the text), logprobs (completions
0-5; chat: true, with top_logprobs 0-20: log-softmax of the raw logits); n must be 1; no tools or
penalties. Errors have OpenAI's body {"error": {"message", "type", "param",
"code"}}: 400 a bad request (malformed JSON, a bad field, a prompt over the context length), 401
no or a wrong token, 404 another model, 408 a request too slow, 503 full (with Retry-After), 500
an internal error (its message a log id; the traceback in the server's log under that id). A
client that goes away cancels its request. The same --token, loopback and connection rules. A body
is JSON nested 64 deep at most, numbers of 100 characters at most, no lone surrogate; a request is
tokenized once, off the event loop, and a text prompt too long for the context by its length
alone is refused before it is tokenized (docs/serve.md).

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
    if args.max_conversations < 1:
        raise UsageError(f"--max-conversations must be positive, got {args.max_conversations}")
    if args.conversation_ttl is not None and not args.conversation_ttl > 0:
        raise UsageError(f"--conversation-ttl must be positive, got {args.conversation_ttl}")
    if args.max_parked_bytes is not None:
        if args.state_dir is None:
            raise UsageError("--max-parked-bytes needs --state-dir: it bounds what is kept there")
        args.max_parked_bytes = byte_count(args.max_parked_bytes, "--max-parked-bytes")
    if args.ray:
        return _ray(args, folder)
    from ..serve import server
    from ..serve.auth import check_exposure
    from ..serve.openai.errors import full_body
    from ..serve.streams.app import DEFAULT_MAX_MESSAGE_BYTES

    try:
        check_exposure(args.host, args.token)
        sock = server.bind(args.host, args.port)
    except ServeError as exc:
        raise UsageError(str(exc)) from None
    slots = _slots(args)
    service, app = _build(args, folder, slots, sock)
    try:
        settings = server.config(app, DEFAULT_MAX_MESSAGE_BYTES, args.max_streams, args.token, full=full_body())
    except ServeError as exc:  # too few open files
        sock.close()
        service.release()
        raise UsageError(str(exc)) from None
    url = server.url_of(sock)

    def ready() -> None:
        print(
            f"ortstate serve: {folder} as model '{service.model_id}' on {url} (OpenAI API at /v1, {slots} "
            "requests generating at once; SIGTERM or Ctrl-C stops it)",
            flush=True,
        )

    server.serve_forever(app, service, sock, settings, ready)
    return _stopped(args, service)


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


def _slots(args: argparse.Namespace) -> int:
    """Requests decoding at once: --max-batch, else 64 (at most --max-streams)."""
    return args.max_batch or min(64, args.max_streams)


def _service_options(args: argparse.Namespace) -> dict[str, Any]:
    """The LLM service's settings from the command line, as a server here and a Ray replica take them."""
    return {
        "model_name": args.model_name,
        "threads": args.threads,
        "max_body_bytes": args.max_message_bytes,
        "max_conversations": args.max_conversations,
        "idle_park": args.idle_park,
        "max_parked_bytes": args.max_parked_bytes,
        "conversation_ttl": args.conversation_ttl,
    }


def _build(args: argparse.Namespace, folder: Path, slots: int, sock: socket.socket) -> tuple[LlmService, Any]:
    """The LLM service and its app (``sock`` is closed if they cannot be made)."""
    from ..serve import server

    try:
        return server.build_llm(
            folder,
            args.max_streams,
            slots,
            args.token,
            state_dir=args.state_dir,
            **_service_options(args),
        )
    except ServeError as exc:  # --state-dir cannot be made, written, read or locked
        sock.close()
        raise UsageError(str(exc)) from None
    except BaseException:
        sock.close()
        raise


def _stopped(args: argparse.Namespace, service: LlmService) -> int:
    """Say the server stopped, and where its conversations were parked; the exit status."""
    parked = service.conversations.parked
    print(
        f"ortstate serve: stopped; {parked} conversations parked in {args.state_dir}"
        if args.state_dir
        else "ortstate serve: stopped",
        flush=True,
    )
    if service.lost:  # each named in the log already
        print(f"ortstate: error: {len(service.lost)} conversations could not be parked: lost", file=sys.stderr)
        return EXIT_STREAMS_LOST
    return EXIT_OK


def ray_preflight(args: argparse.Namespace, what: str) -> None:
    """What ``--ray`` needs before Ray starts (a state directory every replica reaches, made here;
    positive ``--replicas``; Ray Serve installed; the token/loopback rule), each said in one line.
    ``what`` names what moves between replicas through the directory."""
    import importlib.util

    from ..extras import install_hint
    from ..serve.auth import check_exposure

    if args.state_dir is None:
        raise UsageError(f"--ray needs --state-dir: a folder every replica reaches, where {what}")
    if not args.replicas > 0:
        raise UsageError(f"--replicas must be positive, got {args.replicas}")
    if importlib.util.find_spec("ray") is None:
        raise UsageError(f"ortstate serve --ray needs Ray Serve: {install_hint('ray')}")
    try:
        check_exposure(args.host, args.token)
        Path(args.state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    except (ServeError, OSError) as exc:
        why = str(exc) if isinstance(exc, ServeError) else f"--state-dir {args.state_dir}: {exc.strerror}"
        raise UsageError(why) from None


def _ray(args: argparse.Namespace, folder: Path) -> int:
    """Serve the folder on Ray Serve, routed by conversation id, until SIGTERM or Ctrl-C."""
    ray_preflight(args, "conversations move")
    from ..serve.openai.ray_deployment import make_llm_app, route_by_conversation
    from ..serve.ray_serve import serve_on_ray

    slots = _slots(args)
    app = make_llm_app(
        folder,
        args.state_dir,
        replicas=args.replicas,
        max_requests=args.max_streams,
        slots=slots,
        token=args.token,
        **_service_options(args),
    )

    def ready(url: str) -> None:
        print(
            f"ortstate serve: {folder} on {url} (OpenAI API at /v1, Ray Serve, {args.replicas} replicas, "
            f"conversations parked in {args.state_dir}; SIGTERM or Ctrl-C stops it)",
            flush=True,
        )

    route_by_conversation()  # before Ray starts: its proxy reads it
    serve_on_ray(app, args.host, args.port, ready, args.replicas)
    print(f"ortstate serve: stopped; conversations parked in {args.state_dir}", flush=True)
    return EXIT_OK

"""``ortstate serve``: many streams of one stateful model over HTTP and WebSockets (the ``serve``
extra), and ``--bench URL`` to drive a running server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ServeError, UsageError
from ..extras import install_hint, missing_modules
from .args import model_path
from .command import EXIT_OK, Command
from .report import count
from .serve_llm import LLM_HELP, serve_llm
from .serving import EXIT_STREAMS_LOST, ray_installed, run_on_ray, serve_here, usage

if TYPE_CHECKING:
    from ..serve.streams.config import ServeConfig

__all__ = ["COMMAND"]

TOKEN_VARIABLE = "ORTSTATE_SERVE_TOKEN"

DESCRIPTION = f"""\
Serve MODEL (an IR .xml or an ONNX model) to many streams at once: each stream is a client's own
set of the model's variables, stepped over one WebSocket; the steps of concurrent streams are
batched into one run per tick by a StreamPool (a tick runs once --max-batch streams wait, or
--max-delay-ms after the first; under load, each tick at once after the one before). Prints the
server's URL, then serves until SIGTERM or Ctrl-C.

protocol (docs/serve.md):
  GET  /v1/health, /v1/model (inputs, outputs, variables), /v1/stats (streams, batches, latency)
  POST /v1/streams               -> {{"id": "..."}}: a new stream; its id (128 random bits) is the
                                    capability to use it: keep it secret
  WS   /v1/streams/ID            binary message: one step's feeds as numpy.savez bytes (one stream's
                                 shapes: 1 along the batch axis); reply: the outputs, the same way.
                                 text {{"op": "reset"}} / {{"op": "close"}}: reply {{"ok": true}}.
                                 A bad message gets {{"error": "..."}} and changes nothing; an unknown
                                 id is closed with code 4404; reconnecting continues the stream.

state: without --state-dir, a stream's state lives in this process's memory only and dies with
it. With --state-dir, streams idle for --idle-park seconds are parked there (a snapshot per stream,
named by its id), every open stream is parked on SIGTERM or Ctrl-C before the process exits 0, and
a server started again on the same directory continues each stream when its client reconnects.
The directory is checked at start (exit 2 if it cannot be written) and held by one server (a second
exits 2 naming the first's pid); a stream that cannot be parked at shutdown (a full disk) is named
on stderr and the exit code is 3.

With --durable (needs --state-dir): a hard stop (SIGKILL, out of memory, power cut) loses no step a
client was answered: each tick's new states go to a log in --state-dir, one write and one fsync
per tick, before its replies are sent; a server started again on the directory continues every
stream at its last acknowledged step (with --ray: a replica killed, or its node lost, and its
streams continue on another). GET /v1/streams/ID says {{"steps": N, ...}}; the Python Client
resumes by itself. Models with KV caches are refused (their state grows every step).

security: with --token T (or {TOKEN_VARIABLE}=T) every request and WebSocket must carry
"Authorization: Bearer T" (else 401, or close code 4401). Without a token the server listens on
loopback only: any other --host is refused; and it answers only requests whose Host header is
localhost, 127.0.0.1 (127.0.0.0/8) or [::1], any port (else 403: a web page whose site's name is
made to resolve to 127.0.0.1, DNS rebinding, is refused). A request or WebSocket with an Origin
header (a web page's: browsers send one; curl, OpenAI's client and Python's websockets send none)
is refused with 403 (a WebSocket at its handshake) unless the origin is the server's own (its host
and port those of the Host header) or one --allow-origin names exactly (a local web UI on another
port: --allow-origin http://localhost:3000; its requests get CORS answers, preflights before the
token). No TLS: put a TLS proxy in front for a network.
Every request has deadlines: its headers within 5 s of its first byte, its body within 10 s of its
headers (408 beyond), and a connection idle between requests is closed after 5 s; an answer the
client reads none of for 30 s (the server's buffer for it full) is cut. Connections that
have not shown the token (any request's headers, without one) are counted apart, 1,024 at most;
authorised ones have 4 x --max-streams + 64 places, an idle one yielding its place to a new one;
when every place is being answered, a new request gets 503 {{"error": ...}} with Retry-After.

limits: --max-streams open streams (parked ones included: each keeps its slot, so it can always come
back); one more is refused (503 {{"error": ...}}), none is ever evicted. A step message over
--max-message-bytes (or whose arrays are, uncompressed) is answered with an error; one over the
larger of twice that and that plus 64 KiB closes the socket (1009). One slow client delays only its
own stream.

With --ray: the same app on Ray Serve (the ray extra), --replicas replicas each with a pool of
its own, routed by stream id (Ray Serve's consistent-hash router, no fallback); the replicas share
--state-dir (required): a new stream is parked there, a replica restores a stream it does not hold
from there, and a stream's socket is handed over every --handoff seconds (parked; the client
connects again), so a stream survives its replica being removed or replaced. Ray runs on this
machine, or on the cluster RAY_ADDRESS names (then --state-dir must be a shared filesystem).

{LLM_HELP}
With --bench URL: no MODEL; drive the server at URL with --streams concurrent streams of --steps
steps each and print aggregate steps/s, a step's p50/p99 latency and the server's mean batch.

examples:
  ortstate serve models/lstm_2l_dynbatch/model.xml --port 8000
  ortstate serve models/llm/qwen2 --port 8000      # OpenAI API: base_url http://127.0.0.1:8000/v1
  ortstate serve model.xml --state-dir state/ --idle-park 30 --max-streams 4096
  ORTSTATE_SERVE_TOKEN=s3cret ortstate serve model.xml --host 0.0.0.0 --port 8000
  ortstate serve model.xml --ray --replicas 2 --state-dir state/ --port 8000
  ortstate serve --bench http://127.0.0.1:8000 --streams 256 --steps 50"""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model", metavar="MODEL", nargs="?", help="an IR .xml, an ONNX model or an LLM folder (not with --bench)"
    )
    p.add_argument("--model-name", metavar="NAME", help="an LLM's model id in the API (default: the folder's name)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="the port (default 8000; 0: any free port)")
    p.add_argument(
        "--token",
        default=os.environ.get(TOKEN_VARIABLE),
        help=f"the bearer token every request needs (default ${TOKEN_VARIABLE}, if set)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="let web pages of ORIGIN (scheme://host[:port], exactly as the browser sends it: a local web UI on "
        "another port) use the server; repeatable (default: only the server's own origin; no '*')",
    )
    _add_limits(p)
    _add_state(p)
    p.add_argument(
        "--threads",
        type=int,
        metavar="T",
        help="ONNX Runtime intra-op threads (default: the physical cores this process may use; said at start)",
    )
    _add_ray_and_bench(p)


def _add_limits(p: argparse.ArgumentParser) -> None:
    """How many streams, how they batch, how large a message."""
    p.add_argument(
        "--max-streams", type=int, default=1024, metavar="N", help="open streams (LLM: requests) at most (default 1024)"
    )
    p.add_argument(
        "--max-batch",
        type=int,
        metavar="B",
        help="streams per batched run at most (default --max-streams; LLM: requests generating at once, default 64)",
    )
    p.add_argument(
        "--max-delay-ms",
        type=float,
        default=0.5,
        metavar="MS",
        help="a tick waits that long for more streams (default 0.5)",
    )
    p.add_argument(
        "--max-message-bytes",
        type=int,
        default=1 << 20,
        metavar="N",
        help="largest step message or LLM request body (default 1 MiB)",
    )


def _add_state(p: argparse.ArgumentParser) -> None:
    """Where streams and conversations are parked, and what is logged there."""
    p.add_argument(
        "--state-dir", metavar="DIR", help="park streams (LLM: conversations) there, and resume them after a restart"
    )
    p.add_argument(
        "--max-conversations",
        type=int,
        default=1024,
        metavar="N",
        help="LLM: conversations kept at most (default 1024; more park or forget the least recently used)",
    )
    p.add_argument(
        "--max-parked-bytes",
        metavar="N",
        help="LLM: what --state-dir may hold, its logs included (bytes, or with K, M, G or T: powers of 1024; "
        "default 10G, or less where the disk has less room: what DIR holds at start plus half its free space); "
        "past it, the least recently used parked conversations are removed",
    )
    p.add_argument(
        "--no-access-log",
        action="store_true",
        help="LLM: no line per request on stderr (method, path, status, prompt/cached/generated tokens, ms)",
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        metavar="N",
        help="LLM: positions one request may reach, prompt and answer (default: the model's context; at most that)",
    )
    p.add_argument(
        "--kv-cache-bytes",
        metavar="N",
        help="LLM: the KV memory of all requests together (bytes, or with K, M, G or T; default: a quarter of "
        "the machine's; said at start): a request waits until its positions fit; the prefix cache lives in it",
    )
    p.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="LLM: no automatic prefix caching (default: on; the streams of requests that ended stay in the KV "
        "memory, least recently used evicted first, and a request whose prompt starts as one of theirs feeds "
        "only the rest: usage.prompt_tokens_details.cached_tokens says how many it did not)",
    )
    p.add_argument(
        "--conversation-ttl",
        type=float,
        metavar="S",
        help="LLM: remove a conversation idle for S seconds, kept in memory or parked (default: never)",
    )
    p.add_argument(
        "--durable",
        action="store_true",
        help="log every acknowledged step in --state-dir, so none is lost by a hard stop (needs --state-dir)",
    )
    p.add_argument(
        "--idle-park",
        type=float,
        metavar="S",
        help="park streams idle for S seconds (default: never; needs --state-dir)",
    )


def _add_ray_and_bench(p: argparse.ArgumentParser) -> None:
    """Serving on Ray Serve, and driving a running server (``--bench``)."""
    p.add_argument("--ray", action="store_true", help="serve on Ray Serve, --replicas replicas (needs --state-dir)")
    p.add_argument("--replicas", type=int, default=2, metavar="R", help="--ray: replicas (default 2)")
    p.add_argument(
        "--handoff",
        type=float,
        default=5.0,
        metavar="S",
        help="--ray: a socket is handed over (parked, reconnected) after S seconds (default 5)",
    )
    p.add_argument("--bench", metavar="URL", help="drive the server at URL instead of serving")
    p.add_argument("--streams", type=int, default=16, metavar="N", help="--bench: concurrent streams (default 16)")
    p.add_argument("--steps", type=int, default=100, metavar="K", help="--bench: steps per stream (default 100)")


def _check_extra() -> None:
    missing = missing_modules("serve")
    if missing:
        raise UsageError(
            f"ortstate serve needs the serve extra ({', '.join(missing)} missing): {install_hint('serve')}"
        )


def _positive(args: argparse.Namespace, *options: str) -> None:
    for option in options:
        value = getattr(args, option.replace("-", "_"))
        if value is not None and not value > 0:
            raise UsageError(f"--{option} must be positive, got {value}")


def run(args: argparse.Namespace) -> int:
    _check_extra()
    if args.bench is not None:
        return _bench(args)
    if args.model is None:
        raise UsageError("serve needs a MODEL to serve, or --bench URL (see 'ortstate serve --help')")
    if Path(args.model).is_dir() and (Path(args.model) / "config.json").is_file():  # optimum-intel's LLM folder
        return serve_llm(args, Path(args.model))
    if args.model_name is not None or args.max_conversations != 1024:
        raise UsageError("--model-name and --max-conversations apply to an LLM folder")
    if args.max_parked_bytes is not None or args.conversation_ttl is not None:
        raise UsageError("--max-parked-bytes and --conversation-ttl apply to an LLM folder's conversations")
    if args.max_model_len is not None or args.kv_cache_bytes is not None or args.no_access_log:
        raise UsageError("--max-model-len, --kv-cache-bytes and --no-access-log apply to an LLM folder")
    if args.no_prefix_cache:
        raise UsageError("--no-prefix-cache applies to an LLM folder")
    config = _config(args, model_path(args.model))  # a folder of one stream model names it
    return _ray(args, config) if args.ray else _serve_here(config)


def _config(args: argparse.Namespace, path: Path) -> ServeConfig:
    """The stream server's config from the command line (it checks every setting: exit 2)."""
    from ..serve.streams.config import ServeConfig

    try:
        return ServeConfig(
            str(path),
            max_streams=args.max_streams,
            max_batch=args.max_batch,
            max_delay=args.max_delay_ms / 1e3,
            state_dir=args.state_dir,
            token=args.token,
            allow_origins=tuple(args.allow_origin or ()),
            max_message_bytes=args.max_message_bytes,
            idle_park=args.idle_park,
            threads=args.threads,
            shared=args.ray,
            handoff=args.handoff if args.ray else None,
            durable=args.durable,
            host=args.host,
            port=args.port,
        )
    except ServeError as exc:
        raise usage(exc) from None


def _serve_here(config: ServeConfig) -> int:
    """Serve ``config`` in this process until SIGTERM or Ctrl-C."""
    from ..serve.streams.server import build

    kept = f"streams parked in {config.state_dir}" if config.state_dir else "state in memory only"
    if config.durable:
        kept = f"every step logged in {config.state_dir}"

    def says(_: Any, url: str) -> str:
        threads = f"{config.threads_used} threads"
        return f"ortstate serve: {config.model} on {url} ({kept}, {threads}; SIGTERM or Ctrl-C stops it)"

    service = serve_here(config, build, says)
    parked = service.stats()["streams_parked"]
    print(
        f"ortstate serve: stopped; {count(parked, 'stream')} parked in {config.state_dir}"
        if config.state_dir
        else "ortstate serve: stopped",
        flush=True,
    )
    if service.lost:  # each named in the log already
        lost = len(service.lost)
        print(f"ortstate: error: {lost} streams could not be parked in {config.state_dir}: lost", file=sys.stderr)
        return EXIT_STREAMS_LOST
    return EXIT_OK


def _ray(args: argparse.Namespace, config: ServeConfig) -> int:
    """Serve ``config`` on Ray Serve, ``--replicas`` replicas routed by stream id, until SIGTERM or Ctrl-C."""
    ray_installed()
    from ..serve.streams.ray_deployment import make_app

    def ready(url: str) -> None:
        print(
            f"ortstate serve: {config.model} on {url} (Ray Serve, {args.replicas} replicas, streams parked in "
            f"{config.state_dir}; SIGTERM or Ctrl-C stops it)",
            flush=True,
        )

    run_on_ray(config, make_app, args.replicas, ready)
    print(f"ortstate serve: stopped; streams parked in {config.state_dir}", flush=True)
    return EXIT_OK


def _bench(args: argparse.Namespace) -> int:
    if args.model is not None:
        raise UsageError("--bench drives a running server: give its URL, not a MODEL")
    if args.allow_origin:
        raise UsageError("--allow-origin is a server's: --bench sends no Origin")
    _positive(args, "streams", "steps")
    from ..serve.server import run_loop
    from ..serve.streams.bench import run_bench

    result = run_loop(run_bench(args.bench, args.streams, args.steps, args.token))
    print(result.summary())
    sys.stdout.flush()
    return EXIT_OK


COMMAND = Command(
    "serve",
    "serve many streams of a model over WebSockets, or an LLM with OpenAI's API, batched",
    DESCRIPTION,
    configure,
    run,
)

"""Every request on a connection is under deadlines, and no connection keeps the others out
(serve/guard.py), with real sockets on 127.0.0.1: connections stalled in a second request's body
(issue 37: 127 of them made every request answer 503 in plain text) yield their places to new
clients, the longest waiting first; each request's headers and body, and a kept-alive connection
between requests, have deadlines; a server whose every place is being answered refuses a new
request with 503 in JSON and Retry-After. The tests wait on the server's replies and closes (a
socket timeout only bounds a failure); deadlines are made short through the server's setting."""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import sockets
from oracle import REPO

from ortstate.serve import Deadlines, LlmServeConfig, serve_llm_in_thread, server
from ortstate.serve.openai.errors import error_body

LLM = REPO / "models" / "llm" / "llama"
LONG = Deadlines(headers=120, body=120, idle=120)  # never met while a test runs
SHORT = Deadlines(headers=0.5, body=0.5, idle=0.5)
HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
STALLED_BODY = (
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{"
)


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One whole HTTP response read from ``sock`` (a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(65536)
        assert part, f"closed after {data!r}"
        data += part
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        part = sock.recv(65536)
        assert part, "closed in the body"
        body += part
    return int(lines[0].split()[1]), headers, body


def until_closed(sock: socket.socket) -> bytes:
    """What the server sends before it closes ``sock`` (its close is the event waited for)."""
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while part := sock.recv(65536):
            data += part
    return data


def still_open(sock: socket.socket) -> bool:
    """Nothing came on ``sock``, not even its end (looked at without waiting; poll, not select,
    which refuses a descriptor past 1023 in a process that holds many)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)


def test_stalled_second_requests_yield_their_places_to_new_clients() -> None:
    """``--max-streams 1``: 68 places. 80 keep-alive connections each make a whole request, then
    start a second whose body never ends; each new one past 68 closes the one waiting longest, and
    so do a new client's /health and completion, which are answered."""
    completion = json.dumps({"model": "llama", "prompt": "Hello", "max_tokens": 2, "temperature": 0}).encode()
    new_client = [
        HEALTH,
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(completion), completion),
    ]
    with (
        serve_llm_in_thread(LlmServeConfig(LLM, 1, slots=1, deadlines=LONG)) as running,
        sockets() as held,
        sockets() as fresh,
    ):
        for _ in range(80):
            held.append(connect(running.url))
            held[-1].sendall(HEALTH)
            assert response(held[-1])[0] == 200
            held[-1].sendall(STALLED_BODY)
        answers = []
        for request in new_client:  # each on a connection of its own, kept open
            fresh.append(connect(running.url))
            fresh[-1].sendall(request)
            answers.append(response(fresh[-1]))
        assert (answers[0][0], answers[0][1]["content-type"], json.loads(answers[0][2])) == (
            200,
            "application/json",
            {"ok": True},
        )
        assert (answers[1][0], json.loads(answers[1][2])["usage"]["completion_tokens"]) == (200, 2)
        for sock in held[:14]:  # 12 for the 69th to 80th, one for each new client: closed, nothing said
            assert until_closed(sock) == b""
        assert all(still_open(sock) for sock in held[14:])


LATE = "the request was not sent in time (its headers within 0.5 s, its body within 0.5 s)"
CASES = {  # what a kept-alive connection sends after a whole first request; what it gets (OpenAI's body), then closed
    "a second request's body stalls": (STALLED_BODY, 408, LATE, "request_timeout"),
    "a second request's headers stall": (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n", 408, LATE, "request_timeout"),
    "nothing after a first request": (b"", None, None, None),
    "a second request that is not HTTP": (
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n",
        400,
        "the request is not valid HTTP/1.1",
        "invalid_http",
    ),
    "a second request's headers over 64 KiB, whole": (
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"b" * 70_000 + b"\r\n\r\n",
        431,
        "the request line and headers are over 65536 bytes",
        "headers_too_large",
    ),
    "a second request's headers over 64 KiB": (
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"b" * 70_000,
        431,
        "the request line and headers are over 65536 bytes",
        "headers_too_large",
    ),
}


@pytest.fixture(scope="module")
def short() -> Iterator[Any]:
    with serve_llm_in_thread(LlmServeConfig(LLM, 2, slots=1, deadlines=SHORT)) as running:
        yield running


@pytest.mark.parametrize(("then", "status", "message", "code"), CASES.values(), ids=CASES.keys())
def test_every_request_on_a_connection_has_deadlines(
    short: Any, then: bytes, status: int | None, message: str | None, code: str | None
) -> None:
    """...and what the guard answers itself is JSON in OpenAI's shape (uvicorn's 400 is plain text)."""
    with contextlib.closing(connect(short.url)) as sock:
        sock.sendall(HEALTH)
        assert response(sock)[0] == 200
        sock.sendall(then)
        if status is None:
            assert until_closed(sock) == b""
        else:
            got, headers, body = response(sock)
            assert until_closed(sock) == b""
            assert (got, headers["content-type"], json.loads(body)) == (
                status,
                "application/json",
                {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}},
            )
    with contextlib.closing(connect(short.url)) as sock:  # the server goes on
        sock.sendall(HEALTH)
        assert response(sock)[0] == 200


class _Nothing:
    """The server lifecycle's protocol, for an app of this test's own."""

    async def drain(self, timeout: float) -> None:
        pass

    async def park_all(self) -> int:
        return 0

    def release(self) -> None:
        pass


@dataclass(frozen=True)
class _Bare:
    """A server's config for a bare ASGI app: one stream's places (68 connections), long deadlines."""

    errors: Any
    deadlines: Deadlines = LONG
    host: str = "127.0.0.1"
    port: int = 0

    def uvicorn_config(self, app: Any) -> Any:
        return server.uvicorn_config(
            app, places=1, token=None, deadlines=self.deadlines, max_message_bytes=1 << 16, errors=self.errors
        )


def _lifespan_or(serve: Any) -> Any:
    """An ASGI app: ``serve(scope, receive, send)`` for requests, the lifespan's messages answered."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await serve(scope, receive, send)

    return app


def test_an_answer_its_client_stops_reading_is_cut() -> None:
    """A client that asks for a stream and reads none of it: once the server's buffer for it is full
    and stays full ``write`` seconds, the connection is aborted and the app sees the client gone (it
    waited to send forever: the answer, and its place, were held for good)."""
    ended, sent = threading.Event(), []

    async def stream(scope: Any, receive: Any, send: Any) -> None:
        await receive()  # the request (no body)
        gone = asyncio.ensure_future(receive())  # http.disconnect, once the client is gone
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        while not gone.done() and len(sent) < 100_000:
            await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
            sent.append(1)
        ended.set()

    bare, made = _Bare(None, Deadlines(headers=120, body=120, idle=120, write=0.5)), []
    config = SimpleNamespace(host=bare.host, port=0)
    config.uvicorn_config = lambda app: made.append(bare.uvicorn_config(app)) or made[-1]
    with server.in_thread(config, lambda _: (_Nothing(), _lifespan_or(stream)), 60) as running:
        host, port = running.url.removeprefix("http://").split(":")
        with contextlib.closing(socket.socket()) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            sock.sendall(HEALTH)
            assert ended.wait(60), f"{len(sent)} chunks sent, then the server waited for the client for good"
            assert len(sent) < 100_000
            assert made[0].http.guard.closed_unread == 1


FULL = "server full: every connection is being answered; try again later"


@pytest.mark.parametrize(
    ("errors", "said"),
    [
        (error_body, {"error": {"message": FULL, "type": "server_error", "param": None, "code": "server_full"}}),
        (None, {"error": FULL}),
    ],
    ids=["OpenAI's body", "the stream server's"],
)
def test_a_server_whose_every_place_is_answering_refuses_in_json(errors: Any, said: dict) -> None:
    """68 places (``max_streams`` 1), each held by a request being answered: a new request gets
    503, JSON, ``Retry-After``, and its connection is closed; none of the 68 is closed for it."""
    release, holding = threading.Event(), []

    async def hold(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/hold":
            holding.append(1)
            while not release.is_set():
                await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})

    with server.in_thread(_Bare(errors), lambda _: (_Nothing(), _lifespan_or(hold)), 60) as running, sockets() as held:
        for _ in range(68):
            held.append(connect(running.url))
            held[-1].sendall(b"GET /hold HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        while len(holding) < 68:  # every place is being answered
            time.sleep(0.01)
        with contextlib.closing(connect(running.url)) as refused:
            refused.sendall(HEALTH)
            status, headers, body = response(refused)
            assert until_closed(refused) == b""
        assert (status, headers["content-type"], headers["retry-after"], json.loads(body)) == (
            503,
            "application/json",
            "1",
            said,
        )
        assert all(still_open(sock) for sock in held)
        release.set()
        assert [response(sock)[0] for sock in held] == [200] * 68
        with contextlib.closing(connect(running.url)) as fresh:
            fresh.sendall(HEALTH)
            assert response(fresh)[0] == 200

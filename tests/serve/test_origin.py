"""Browsers cannot drive a server on loopback (:mod:`ortstate.serve.origin`), over real sockets on
127.0.0.1, for both servers: a token-less server answers only requests to a loopback name (DNS
rebinding); a request or WebSocket whose ``Origin`` is another site's is refused (403 in the
server's JSON, a WebSocket at its handshake) unless ``allow_origins`` names it; programs, which
send no ``Origin``, are served as before; with a token, any ``Host`` is served."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import Lone, assert_same, feeds, openai_error, running
from oracle import REPO
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from ortstate.serve import LlmServeConfig, serve_llm_in_thread
from ortstate.serve.streams.codec import decode_npz, encode_npz

LLM = REPO / "models" / "llm" / "llama"
TOKEN = "s3cret"
UI = "http://localhost:3000"  # a local web UI let in with allow_origins
UI_OF_GUARDED = "http://localhost:4000"  # the one the server with a token lets in
EVIL = "http://evil.example"

needs_llm = pytest.mark.skipif(sys.version_info < (3, 11), reason="LLM serving needs Python 3.11+")
PARAMS = [pytest.param("streams"), pytest.param("llm", marks=needs_llm)]


def _start(kind: str, **options: Any) -> Any:
    if kind == "streams":
        return running(slots=64, **options)  # a stream each POST opens is kept
    return serve_llm_in_thread(LlmServeConfig(LLM, 4, slots=2, access_log=False, **options))


@pytest.fixture(scope="module", params=PARAMS)
def servers(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any, Any]]:
    """(the server's kind, one without a token that lets ``UI`` in, one with a token)."""
    with (
        _start(request.param, allow_origins=(UI,)) as open_,
        _start(request.param, token=TOKEN, allow_origins=(UI_OF_GUARDED,)) as guarded,
    ):
        yield request.param, open_, guarded


def _exchange(
    url: str,
    headers: dict[str, str] | list[tuple[str, str]],
    method: str = "GET",
    path: str = "/v1/health",
    body: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """A raw request with exactly ``headers`` (``Host`` among them; pairs: a name repeated): status,
    headers (names lower-cased), body."""
    connection = http.client.HTTPConnection("127.0.0.1", _port(url), timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items() if isinstance(headers, dict) else headers:
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("content-length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def _request(
    url: str, headers: Any, method: str = "GET", path: str = "/v1/health", body: Any = None
) -> tuple[int, Any]:
    """:func:`_exchange`: status, JSON body."""
    status, _, got = _exchange(url, headers, method, path, body)
    return status, json.loads(got)


def _post(kind: str, url: str, headers: dict[str, str]) -> tuple[int, Any]:
    """A POST a page could send: the stream server's ``POST /v1/streams`` (no body), the LLM
    server's ``/tokenize``."""
    if kind == "streams":
        return _request(url, headers, "POST", "/v1/streams")
    body = json.dumps({"prompt": "hi"}).encode()
    return _request(url, {"content-type": "application/json", **headers}, "POST", "/tokenize", body)


def _forbidden(kind: str, message: str) -> Any:
    return {"error": message} if kind == "streams" else openai_error(message, code="forbidden")


def _host_refused(shown: str) -> str:
    return (
        f"the Host header ({shown}) names no loopback host: a server without a token answers requests to "
        "localhost, 127.0.0.1 or [::1] only (against DNS rebinding); give it a --token to serve other names"
    )


def _origin_refused(shown: str, let_in: str) -> str:
    return (
        f"the Origin header ({shown}) is another site's: a web page may use this server only from the "
        f"server's own origin; start the server with {let_in} to let that page in"
    )


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}", "localhost@evil", "[::2]:{port}"]
)
def test_a_host_that_is_not_loopback_is_refused_without_a_token(servers, host):
    kind, server, guarded = servers
    given = host.format(port=_port(server.url))
    assert _request(server.url, {"Host": given}) == (403, _forbidden(kind, _host_refused(repr(given))))
    assert _post(kind, server.url, {"Host": given}) == (403, _forbidden(kind, _host_refused(repr(given))))
    # with a token, the token is the defence: any name is served
    assert _request(guarded.url, {"Host": given, "Authorization": f"Bearer {TOKEN}"}) == (200, {"ok": True})


def test_a_request_without_one_host_or_with_two_origins_is_refused(servers):
    kind, server, _ = servers
    assert _request(server.url, {}) == (403, _forbidden(kind, _host_refused("missing")))
    loopback = f"127.0.0.1:{_port(server.url)}"
    two = _forbidden(kind, "the request has more than one Host or Origin header: send one of each at most")
    assert _request(server.url, [("Host", loopback), ("Host", "evil.example")]) == (403, two)
    own = f"http://{loopback}"
    assert _request(server.url, [("Host", loopback), ("Origin", own), ("Origin", EVIL)]) == (403, two)


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "LocalHost", "127.0.0.1", "[::1]:{port}"])
def test_a_loopback_host_is_served(servers, host):
    kind, server, _ = servers
    given = host.format(port=_port(server.url))
    assert _request(server.url, {"Host": given}) == (200, {"ok": True})
    assert _post(kind, server.url, {"Host": given})[0] in (200, 201)


@pytest.mark.parametrize(
    ("origin", "let_in"),
    [
        (EVIL, f"--allow-origin {EVIL}"),
        ("https://EVIL.example:8443", "--allow-origin https://evil.example:8443"),
        ("null", "--allow-origin ORIGIN"),  # a sandboxed frame, a file:// page
        ("http://localhost:{port}", "--allow-origin http://localhost:{port}"),  # not the Host's name
        ("http://127.0.0.1:1", "--allow-origin http://127.0.0.1:1"),  # another port: another site
        ("http://localhost:3000/", "--allow-origin ORIGIN"),  # not an origin as a browser sends it
    ],
)
def test_a_foreign_origin_is_refused_with_or_without_a_token(servers, origin, let_in):
    kind, server, guarded = servers
    for url, more in [(server.url, {}), (guarded.url, {"Authorization": f"Bearer {TOKEN}"})]:
        port = _port(url)
        given = origin.format(port=port)
        refused = (403, _forbidden(kind, _origin_refused(repr(given), let_in.format(port=port))))
        assert _post(kind, url, {"Host": f"127.0.0.1:{port}", "Origin": given, **more}) == refused


def test_the_servers_own_origin_and_an_allowed_one_are_served(servers):
    kind, server, guarded = servers
    port = _port(server.url)
    for host, origin in [
        (f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"),
        (f"localhost:{port}", f"http://LOCALHOST:{port}"),
        (f"[::1]:{port}", f"http://[::1]:{port}"),
        (f"127.0.0.1:{port}", UI),
    ]:
        assert _post(kind, server.url, {"Host": host, "Origin": origin})[0] in (200, 201), origin
    # an allowed origin is the one server's: the other was not told
    headers = {"Host": f"127.0.0.1:{_port(guarded.url)}", "Origin": UI, "Authorization": f"Bearer {TOKEN}"}
    assert _post(kind, guarded.url, headers)[0] == 403


def test_an_allowed_origin_gets_cors_answers_the_servers_own_needs_none(servers):
    """A web UI let in can send JSON (its preflight answered, before the token) and read the reply."""
    _, server, guarded = servers
    port = _port(server.url)
    preflight = {
        "Host": f"127.0.0.1:{port}",
        "Origin": UI,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization",
    }
    status, headers, _ = _exchange(server.url, preflight, "OPTIONS")
    assert status == 200
    assert headers["access-control-allow-origin"] == UI
    assert headers["access-control-allow-headers"] == "content-type, authorization"
    assert "POST" in headers["access-control-allow-methods"]
    status, headers, _ = _exchange(server.url, {"Host": f"127.0.0.1:{port}", "Origin": UI})
    assert (status, headers["access-control-allow-origin"]) == (200, UI)
    status, headers, _ = _exchange(server.url, {"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port}"})
    assert status == 200 and "access-control-allow-origin" not in headers
    # a preflight carries no token: it is answered before the token is asked for
    preflight.update(Host=f"127.0.0.1:{_port(guarded.url)}", Origin=UI_OF_GUARDED)
    status, headers, _ = _exchange(guarded.url, preflight, "OPTIONS")
    assert (status, headers["access-control-allow-origin"]) == (200, UI_OF_GUARDED)


def _ws(url: str, path: str, **kwargs: Any) -> Any:
    return connect("ws" + url.removeprefix("http") + path, open_timeout=10, **kwargs)


def test_a_websocket_from_a_foreign_origin_is_refused_at_its_handshake(servers):
    kind, server, _ = servers
    with pytest.raises(InvalidStatus) as info:
        _ws(server.url, "/v1/streams/" + "A" * 22, origin=EVIL)
    response = info.value.response
    assert response.status_code == 403
    assert json.loads(response.body) == _forbidden(kind, _origin_refused(repr(EVIL), f"--allow-origin {EVIL}"))


def test_a_websocket_from_the_servers_own_origin_or_an_allowed_one_steps_its_stream(servers):
    kind, server, _ = servers
    if kind != "streams":
        pytest.skip("the LLM server has no WebSocket")
    for origin in (server.url, UI, None):
        status, opened = _post(kind, server.url, {"Host": f"127.0.0.1:{_port(server.url)}"})
        assert status == 201
        fed = feeds(np.random.default_rng(5))
        with _ws(server.url, f"/v1/streams/{opened['id']}", origin=origin) as ws:
            ws.send(encode_npz(fed))
            assert_same(decode_npz(ws.recv(timeout=30), 1 << 20), Lone().step(fed))
            ws.send('{"op": "close"}')
            assert json.loads(ws.recv(timeout=30)) == {"ok": True}

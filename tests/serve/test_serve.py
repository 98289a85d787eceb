"""ortstate serve over real sockets on 127.0.0.1: each stream's outputs equal a lone StatefulSession's,
through resets, reconnects, parks and bad messages; ids are capabilities; tokens; limits."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket
import threading
import time
import urllib.error
import urllib.request
import zipfile

import numpy as np
import pytest
from conftest import Lone, assert_same, feeds, raw_npy, running
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ortstate.errors import ServeError
from ortstate.serve import AsyncClient, Client
from ortstate.serve.streams.codec import decode_npz, encode_npz
from ortstate.serve.streams.ids import new_id as ortstate_id


def _http(url: str, method: str = "GET", token: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _socket(url: str, stream: str, **kwargs):
    return connect("ws" + url.removeprefix("http") + f"/v1/streams/{stream}", open_timeout=10, **kwargs)


def _closed_with(ws) -> tuple[int, str]:
    with pytest.raises(ConnectionClosed) as info:
        ws.recv(timeout=10)
    return info.value.rcvd.code, info.value.rcvd.reason


def test_model_health_and_stats(shared):
    assert _http(shared.url + "/v1/health") == (200, {"ok": True})
    assert _http(shared.url + "/v1/model") == (
        200,
        {
            "inputs": [{"name": "x", "dtype": "float32", "shape": [1, None, 8]}],
            "outputs": [{"name": "y", "dtype": "float32", "batch_axis": 0}],
            "variables": [
                {"id": "h_inh_out", "dtype": "float32", "shape": [2, 1, 16]},
                {"id": "c_inc_out", "dtype": "float32", "shape": [2, 1, 16]},
            ],
        },
    )
    status, stats = _http(shared.url + "/v1/stats")
    assert status == 200 and stats["max_streams"] == 64
    assert {"streams_open", "streams_parked", "runs", "mean_batch", "step_p50_ms", "step_p99_ms"} <= stats.keys()


def test_concurrent_streams_equal_lone_sessions_and_are_batched():
    """8 concurrent clients, steps of 1-3 time steps, resets: every output as a lone stream's; the
    steps of a round were batched (a tick waits for all 8, up to half a second)."""
    rng = np.random.default_rng(0)
    count, rounds = 8, 6
    plan = [[feeds(rng, 1 + (r % 3)) for r in range(rounds)] for _ in range(count)]
    resets = {(1, 2), (5, 4)}  # (stream, round): reset before that round's step

    async def drive(client: AsyncClient, k: int) -> list:
        stream = await client.open()
        got = []
        for r, fed in enumerate(plan[k]):
            if (k, r) in resets:
                await stream.reset()
            got.append(await stream.step(fed))
        await stream.close()
        return got

    async def main(url: str) -> list:
        client = AsyncClient(url)
        return await asyncio.gather(*(drive(client, k) for k in range(count)))

    with running(slots=count, max_batch=count, max_delay=0.5) as server:
        results = asyncio.run(main(server.url))
        stats = server.service.stats()
    for k in range(count):
        lone = Lone()
        for r, fed in enumerate(plan[k]):
            if (k, r) in resets:
                lone.reset()
            assert_same(results[k][r], lone.step(fed), f"stream {k} step {r}")
    assert stats["max_batch"] > 1 and stats["steps"] == count * rounds and stats["streams_open"] == 0


def test_reconnect_continues_and_a_second_connection_takes_over(shared):
    rng = np.random.default_rng(1)
    lone, client = Lone(), Client(shared.url)
    stream = client.open()
    for _ in range(2):
        fed = feeds(rng)
        assert_same(stream.step(fed), lone.step(fed))
    stream.disconnect()
    again = client.stream(stream.id)
    fed = feeds(rng)
    assert_same(again.step(fed), lone.step(fed), "after reconnecting")
    third = client.stream(stream.id)  # the same stream from another connection: it takes over
    fed = feeds(rng)
    assert_same(third.step(fed), lone.step(fed), "the new connection")
    with pytest.raises(ServeError) as info:
        again.step(fed)
    assert info.value.code == 4409
    third.close()


def _npz_of(**entries: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return out.getvalue()


def _npy(value: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, value, allow_pickle=True)
    return out.getvalue()


BAD = [
    (b"not a zip at all", "binary message is not an .npz (numpy.savez bytes)"),
    (encode_npz({"z": np.zeros((1, 1, 8), np.float32)}), "missing input(s) x; unknown input(s) z (inputs: x)"),
    (encode_npz({"x": np.zeros((1, 1, 8), np.float64)}), "input 'x': dtype float64, expected float32"),
    (
        encode_npz({"x": np.zeros((2, 1, 8), np.float32)}),
        "input 'x': shape [2, 1, 8], expected [1,?,8] (one stream: 1 along axis 0)",
    ),
    (b"\0" * 70000, "message of 70000 bytes is over the limit of 65536 bytes"),
    (
        _npz_of(**{"x.npy": _npy(np.zeros((1, 100000, 8), np.float32))}),  # deflates to a few KB
        "the .npz's arrays take 3200128 bytes uncompressed, over the limit of 65536 bytes",
    ),
    (
        _npz_of(**{"x.npy": _npy(np.array([{}], object))}),
        ".npz entry 'x.npy' is not a readable .npy array (object arrays are refused)",
    ),
    (encode_npz({}), "the .npz holds no array"),
    # the probes, answered in Python's words before (MemoryError, OverflowError, a heap address)
    (
        _npz_of(**{"x.npy": raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1000000000000, 8), }")}),
        ".npz entry 'x.npy' has shape [1, 1000000000000, 8], too large for the limit of 65536 bytes",
    ),
    (
        _npz_of(
            **{"x.npy": raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2361183241434822606848), }")}
        ),
        ".npz entry 'x.npy' has shape [1, 2361183241434822606848], too large for the limit of 65536 bytes",
    ),
    (
        _npz_of(**{"x.npy": raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': __import__('os').getpid(), }")}),
        ".npz entry 'x.npy' is not a readable .npy array (its header is not a literal dict)",
    ),
    (
        "hello",
        'text message is not valid JSON: Expecting value: line 1 column 1 (char 0) (ops: {"op": "reset"}, '
        '{"op": "close"})',
    ),
    (  # read within bounds (serve/json_body.py): Python's own parser would recurse past its limit
        "[" * 30000 + "]" * 30000,
        'text message nests arrays and objects 30000 deep: at most 64 (ops: {"op": "reset"}, {"op": "close"})',
    ),
    ('{"op": "explode"}', 'unknown op "explode" (ops: reset, close, last, as {"op": "reset"})'),
    ("[1]", 'unknown op missing (ops: reset, close, last, as {"op": "reset"})'),
]


def test_bad_messages_are_answered_and_change_nothing(shared):
    rng = np.random.default_rng(2)
    lone = Lone()
    stream = Client(shared.url).open().id
    with _socket(shared.url, stream) as ws:
        fed = feeds(rng)
        ws.send(encode_npz(fed))
        lone.step(fed)
        ws.recv(timeout=10)
        for message, error in BAD:
            ws.send(message)
            assert json.loads(ws.recv(timeout=10)) == {"error": error}
        fed = feeds(rng)
        ws.send(encode_npz(fed))
        assert_same(decode_npz(ws.recv(timeout=10), 1 << 20), lone.step(fed), "after the bad messages")
        ws.send(b"\0" * 200000)  # over twice the limit: the socket is closed, the stream kept
        assert _closed_with(ws)[0] == 1009
    assert shared.service.knows(stream)


def test_unknown_ids_are_refused_and_create_nothing(shared):
    before = shared.service.stats()["streams_open"]
    client = Client(shared.url)
    closed = client.open()
    closed.close()
    for stream in ["A" * 22, closed.id, "short", "..%2F..%2Fetc", "A" * 23, "a/b"]:
        with _socket(shared.url, stream) as ws:
            assert _closed_with(ws) == (4404, "no such stream: open one with POST /v1/streams")
    assert shared.service.stats()["streams_open"] == before


def test_a_token_guards_every_request():
    with running(slots=2, token="s3cret") as server:
        for token in (None, "wrong", "s3cre"):
            assert _http(server.url + "/v1/health", token=token) == (
                401,
                {"error": "missing or wrong token (send Authorization: Bearer TOKEN)"},
            )
            assert _http(server.url + "/v1/streams", "POST", token=token)[0] == 401
        status, reply = _http(server.url + "/v1/streams", "POST", token="s3cret")
        assert status == 201
        with _socket(server.url, reply["id"]) as ws:
            assert _closed_with(ws)[0] == 4401
        stream = Client(server.url, token="s3cret").stream(reply["id"])
        fed = feeds(np.random.default_rng(3))
        assert_same(stream.step(fed), Lone().step(fed))
        with pytest.raises(ServeError, match="401 missing or wrong token"):
            Client(server.url).open()


def test_max_streams_refuses_and_never_evicts():
    with running(slots=2) as server:
        client = Client(server.url)
        a, b = client.open(), client.open()
        status, reply = _http(server.url + "/v1/streams", "POST")
        assert (status, reply) == (
            503,
            {
                "error": "server full: it holds 2 of --max-streams 2 streams; a stream is freed when its client "
                "closes it"
            },
        )
        fed = feeds(np.random.default_rng(4))
        assert_same(a.step(fed), Lone().step(fed))  # both still there
        assert_same(b.step(fed), Lone().step(fed))
        b.close()
        client.open().close()


def test_idle_streams_are_parked_and_resume_exactly(tmp_path):
    rng = np.random.default_rng(5)
    lone = Lone()
    with running(slots=4, state_dir=tmp_path, idle_park=0.1) as server:
        stream = Client(server.url).open()
        for _ in range(2):
            fed = feeds(rng)
            assert_same(stream.step(fed), lone.step(fed))
        deadline = time.monotonic() + 10
        while server.service.stats()["streams_parked"] != 1:
            assert time.monotonic() < deadline, "the idle stream was not parked"
            time.sleep(0.05)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".lock", f"{stream.id}.npz"])  # held here
        fed = feeds(rng)
        assert_same(stream.step(fed), lone.step(fed), "resumed from its parked state")
        stream.close()
        assert [p.name for p in tmp_path.iterdir()] == [".lock"]
    assert list(tmp_path.iterdir()) == []  # let go when it stopped


def test_a_client_that_never_reads_stalls_no_one_else(shared):
    """One socket sends 100 long steps and reads none of the 6 MB of replies (its sends block too,
    in a thread of their own); another stream goes on stepping meanwhile."""
    rng = np.random.default_rng(6)
    hog = Client(shared.url).open().id
    big = encode_npz(feeds(rng, 1000))  # 32 KB of feeds, 64 KB of outputs per step
    with _socket(shared.url, hog) as ws:

        def flood() -> None:
            with contextlib.suppress(Exception):  # its socket is shut down under it at the end
                for _ in range(100):
                    ws.send(big)

        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        lone, stream = Lone(), Client(shared.url).open()
        for _ in range(20):
            fed = feeds(rng)
            assert_same(stream.step(fed), lone.step(fed))
        stream.close()
        ws.socket.shutdown(socket.SHUT_RDWR)
        sender.join(10)
    assert shared.service.knows(hog)


def test_hostile_clients_reach_no_other_stream(shared):
    """Garbage frames, guessed ids, a reconnect storm, raw bytes that are not HTTP, a handshake
    left half-written: the server goes on, and another stream steps exactly as alone."""
    rng = np.random.default_rng(7)
    lone, victim = Lone(), Client(shared.url).open()

    def victim_steps() -> None:
        fed = feeds(rng)
        assert_same(victim.step(fed), lone.step(fed))

    victim_steps()
    before = shared.service.stats()["streams_open"]
    host, port = shared.url.removeprefix("http://").rsplit(":", 1)
    half = socket.create_connection((host, int(port)), timeout=10)  # a handshake never finished
    half.sendall(b"GET /v1/streams/x HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(bytes(rng.integers(0, 256, 4096, dtype=np.uint8)) + b"\r\n\r\n")
        assert raw.recv(4096).startswith(b"HTTP/1.1 400 ")
    mine = Client(shared.url).open().id
    with _socket(shared.url, mine) as ws:
        for size in (1, 10, 1000, 60000):
            ws.send(bytes(rng.integers(0, 256, size, dtype=np.uint8)))
            assert "error" in json.loads(ws.recv(timeout=10))
    victim_steps()
    for _ in range(30):  # a reconnect storm on its own stream, each connection cut at once
        _socket(shared.url, mine).socket.close()
    for _ in range(30):  # guessing ids
        with _socket(shared.url, ortstate_id()) as ws:
            assert _closed_with(ws)[0] == 4404
    victim_steps()
    half.close()
    assert shared.service.stats()["streams_open"] == before + 1  # only its own stream
    victim.close()


def test_where_a_stream_is(shared):
    client = Client(shared.url)
    stream = client.open()
    where = {"id": stream.id, "state": "memory", "server": shared.service.name, "steps": 0, "durable": False}
    assert client.where(stream.id) == where
    stream.step(feeds(np.random.default_rng(3)))
    assert client.where(stream.id) == {**where, "steps": 1}
    stream.close()
    with pytest.raises(ServeError, match="404 no such stream"):
        client.where(stream.id)


def test_servers_sharing_a_state_dir_hand_streams_over(tmp_path):
    """Two servers on one directory (as Ray Serve's replicas): a stream opened on one steps on the
    other (restored on a miss), and back; each socket is handed over after 0.2 s (closed with 1012,
    the client connects again and sends again); the outputs are a lone stream's throughout."""
    rng = np.random.default_rng(8)
    lone = Lone()
    options = {"state_dir": tmp_path, "shared": True, "handoff": 0.2}
    with running(slots=4, **options) as a, running(slots=4, **options) as b:
        stream = Client(a.url).open()
        assert Client(a.url).where(stream.id)["state"] == "parked"  # a new stream waits on disk
        for server in (b, a, b):
            moved = Client(server.url).stream(stream.id)
            for _ in range(3):
                fed = feeds(rng)
                assert_same(moved.step(fed), lone.step(fed), server.url)
            assert Client(server.url).where(stream.id) == {
                "id": stream.id,
                "state": "memory",
                "server": server.service.name,
                "steps": None,  # shared: another server stepped it too, so this one does not know
                "durable": False,
            }
            time.sleep(0.3)  # the socket's time is up: it is parked and closed
            fed = feeds(rng)
            assert_same(moved.step(fed), lone.step(fed), "after the handover")
            moved.disconnect()
            deadline = time.monotonic() + 10
            while Client(server.url).where(stream.id)["state"] != "parked":
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert a.service.stats()["steps"] == 4 and b.service.stats()["steps"] == 8
        Client(a.url).stream(stream.id).close()
    assert list(tmp_path.iterdir()) == []


def test_an_unexpected_error_is_logged_not_told(caplog):
    """A bug in answering a message: the client gets our words, the server's log gets Python's."""
    with running(slots=2) as server:

        async def broken(stream, fed):
            raise MemoryError("Unable to allocate 29.1 TiB for an array with shape (8000000000000,)")

        server.service.step = broken
        stream = Client(server.url).open().id
        with caplog.at_level("ERROR", logger="ortstate.serve"), _socket(server.url, stream) as ws:
            ws.send(encode_npz(feeds(np.random.default_rng(9))))
            assert json.loads(ws.recv(timeout=10)) == {"error": "internal error (logged on the server)"}
            ws.send('{"op": "reset"}')  # the socket goes on
            assert json.loads(ws.recv(timeout=10)) == {"ok": True}
    logged = [r for r in caplog.records if r.name == "ortstate.serve"]
    assert [r.getMessage() for r in logged] == ["ortstate serve: a stream's message raised"]
    assert "Unable to allocate 29.1 TiB" in str(logged[0].exc_info[1])


def test_an_unknown_stream_is_refused_at_once(shared):
    """``Client.stream(id)`` asks the server first: an id it does not know fails there, not at the
    first step (and an AsyncClient's the same)."""
    unknown = ortstate_id()
    with pytest.raises(ServeError, match=rf"/v1/streams/{unknown}: 404 no such stream") as info:
        Client(shared.url).stream(unknown)
    assert info.value.code == 404

    async def attempt() -> None:
        await AsyncClient(shared.url).stream(unknown)

    with pytest.raises(ServeError, match="404 no such stream"):
        asyncio.run(attempt())


def test_http_errors_are_json_and_an_internal_one_names_a_log_id(monkeypatch, caplog) -> None:
    """No route and an exception inside a route: JSON bodies (never Starlette's plain text), the
    internal one naming a log id the server's log line carries, and none of the exception's text."""
    import json as _json

    with running(slots=2) as r:
        try:
            urllib.request.urlopen(r.url + "/v1/nothing", timeout=10)
            raise AssertionError("no 404")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404 and exc.headers["content-type"] == "application/json"
            assert _json.loads(exc.read()) == {"error": "GET /v1/nothing: Not Found"}

        def broken() -> None:
            raise RuntimeError("secret internals /somewhere/private")

        monkeypatch.setattr(r.service, "stats", broken)
        with caplog.at_level("ERROR", logger="ortstate.serve"):
            try:
                urllib.request.urlopen(r.url + "/v1/stats", timeout=10)
                raise AssertionError("no 500")
            except urllib.error.HTTPError as exc:
                assert exc.code == 500 and exc.headers["content-type"] == "application/json"
                message = _json.loads(exc.read())["error"]
        assert "secret" not in message and "private" not in message
        log_id = message.split("log id ")[1].split(")")[0]
        assert any(log_id in rec.getMessage() and rec.exc_info for rec in caplog.records)

"""The async client's WebSocket (``ortstate/serve/wire.py``) against websockets' own server on
127.0.0.1: frames of every length encoding arrive intact (the server unmasks them), fragmented and
text replies are assembled, pings are answered, a late reply times out without closing, close codes
and refused handshakes come back as websockets' exceptions, and bad UTF-8 closes with 1007."""

from __future__ import annotations

import asyncio
import os

import pytest
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed, InvalidStatus

from ortstate.serve.streams.wire import connect

LIMIT = 1 << 20


async def _handler(ws) -> None:
    """Answers by the first byte of each message: b"e" echo, b"f" fragmented echo, b"t" text,
    b"p" ping then echo, b"s" silence, b"c" close 4321, b"u" bad UTF-8 in a text frame."""
    async for message in ws:
        kind = message[:1] if isinstance(message, bytes) else b"e"
        if kind == b"f":
            await ws.send([message[:3], message[3:7], message[7:]])
        elif kind == b"t":
            await ws.send("héllo " + message[1:].decode())
        elif kind == b"p":
            await (await ws.ping(b"are you there"))
            await ws.send(message)
        elif kind == b"s":
            continue
        elif kind == b"c":
            await ws.close(4321, "told to")
            return
        elif kind == b"u":
            ws.transport.write(b"\x81\x02\xff\xfe")  # a final text frame of two bytes that are not UTF-8
        else:
            await ws.send(message)


def _refuse(connection, request):
    if request.path == "/refused":
        return connection.respond(401, "no\n")
    return None


def run(scenario) -> None:
    async def main() -> None:
        async with serve(_handler, "127.0.0.1", 0, process_request=_refuse, compression=None, max_size=LIMIT) as server:
            port = server.sockets[0].getsockname()[1]
            await scenario(f"ws://127.0.0.1:{port}")

    asyncio.run(main())


@pytest.mark.parametrize("size", [0, 1, 125, 126, 300, 65535, 65536, 300_000])
def test_messages_of_every_length_encoding_arrive_intact(size):
    async def scenario(url):
        ws = await connect(url + "/x", {"X-Session-Id": "abc"}, LIMIT, 10)
        payload = b"e" + os.urandom(size)
        await ws.send(payload)
        assert await ws.recv(10) == payload
        await ws.send("e text ✓")
        assert await ws.recv(10) == "e text ✓"
        await ws.close()

    run(scenario)


def test_fragments_text_and_pings():
    async def scenario(url):
        ws = await connect(url + "/x", {}, LIMIT, 10)
        payload = b"f" + os.urandom(50)
        await ws.send(payload)
        assert await ws.recv(10) == payload  # three frames, one message
        await ws.send(b"tworld")
        assert await ws.recv(10) == "héllo world"
        await ws.send(b"pong me")
        assert await ws.recv(10) == b"pong me"  # the server's ping got its pong first
        await ws.close()

    run(scenario)


def test_a_late_reply_times_out_and_the_connection_goes_on():
    async def scenario(url):
        ws = await connect(url + "/x", {}, LIMIT, 10)
        await ws.send(b"s")
        with pytest.raises(asyncio.TimeoutError):
            await ws.recv(0.2)
        await ws.send(b"e again")
        assert await ws.recv(10) == b"e again"
        await ws.close()

    run(scenario)


def test_close_codes_and_refusals():
    async def scenario(url):
        ws = await connect(url + "/x", {}, LIMIT, 10)
        await ws.send(b"c")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv(10)
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4321, "told to")
        with pytest.raises(ConnectionClosed):
            await ws.send(b"e after the close")
        with pytest.raises(InvalidStatus) as refused:
            await connect(url + "/refused", {}, LIMIT, 10)
        assert refused.value.response.status_code == 401
        with pytest.raises(OSError):
            await connect("ws://127.0.0.1:1/x", {}, LIMIT, 10)

    run(scenario)


def test_bad_utf8_in_a_text_reply_closes_with_1007():
    async def scenario(url):
        ws = await connect(url + "/x", {}, LIMIT, 10)
        await ws.send(b"u")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv(10)
        assert closed.value.sent.code == 1007

    run(scenario)

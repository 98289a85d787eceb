"""Connections that have not shown the token cannot keep authorised clients out (serve/guard.py):
thousands of idle and slowloris sockets against ``ortstate serve`` in a process of its own, while
an authorised client's requests and an open stream's steps keep answering within a second; each
such socket closed by its deadline; the server's memory and open files bounded; headers bounded;
the open files limit raised or refused at start."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import numpy as np
import pytest
from conftest import MODEL, Lone, assert_same, feeds, serving, sockets
from oracle import REPO

from ortstate.serve import Client
from ortstate.serve.guard import MAX_UNPROVEN, Deadlines

TOKEN = "s3cret-token"
IDLE, DRIPS = 2000, 200


def _http(url: str, method: str = "GET", token: str | None = TOKEN) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _timed(call: Callable[[], object]) -> tuple[float, object]:
    start = time.monotonic()
    result = call()
    return time.monotonic() - start, result


def _status(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status").read().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _closed_by_peer(sock: socket.socket) -> bool:
    """The server closed ``sock`` (after a 408 reply, perhaps)."""
    try:
        while sock.recv(1 << 16, socket.MSG_DONTWAIT):
            pass
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True
    return True


def _enough_open_files(needed: int) -> None:
    """This process's soft limit of open files raised to ``needed`` (its sockets are one end of the
    flood); the server started after inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the open files hard limit is {hard}: the flood needs {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def test_idle_and_slowloris_sockets_keep_no_authorised_client_out():
    _enough_open_files(IDLE + DRIPS + 1024)
    rng = np.random.default_rng(30)
    with serving("--token", TOKEN, "--max-streams", "16") as (proc, url), sockets() as idle, sockets() as drips:
        host, port = url.removeprefix("http://").split(":")
        client = Client(url, token=TOKEN)
        stream, lone = client.open(), Lone()
        fed = feeds(rng)
        assert_same(stream.step(fed), lone.step(fed))  # its WebSocket is open before the flood
        rss, files = _status(proc.pid, "VmRSS"), _open_files(proc.pid)

        start = time.monotonic()
        for _ in range(IDLE):
            idle.append(socket.create_connection((host, int(port)), timeout=10))
        for _ in range(DRIPS):
            drips.append(socket.create_connection((host, int(port)), timeout=10))
            drips[-1].sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        opened = time.monotonic()
        assert opened - start < 30, "opening the sockets took too long to test anything"

        slowest: dict[str, float] = {}
        peak_rss = peak_files = 0
        while time.monotonic() < opened + Deadlines().headers + 2:
            for sock in drips:  # a header line each, every half second: never a whole request
                with contextlib.suppress(OSError):
                    sock.send(b"X-Drip: 1\r\n")
            fed = feeds(rng)
            took = {
                "health": _timed(lambda: _http(url + "/v1/health")),
                "open": _timed(lambda: _http(url + "/v1/streams", "POST")),
                "step": _timed(lambda: stream.step(fed)),  # noqa: B023 - called at once
            }
            assert took["health"][1] == (200, {"ok": True})
            assert took["open"][1][0] == 201
            assert_same(took["step"][1], lone.step(fed), "during the flood")
            for name, (seconds, _) in took.items():
                slowest[name] = max(slowest.get(name, 0.0), seconds)
            peak_rss = max(peak_rss, _status(proc.pid, "VmRSS"))
            peak_files = max(peak_files, _open_files(proc.pid))
            time.sleep(0.5)
        assert max(slowest.values()) < 1.0, slowest

        # Every flooding socket was closed by the server: the oldest idle ones at once (more than
        # MAX_UNPROVEN waited), the rest at their deadline; the drips too, a whole request never came.
        assert all(_closed_by_peer(s) for s in idle + drips)
        assert peak_files <= files + MAX_UNPROVEN + 32, (files, peak_files)
        assert _open_files(proc.pid) <= files + 8
        assert peak_rss - rss < 64 * 1024, f"RSS grew from {rss} to {peak_rss} KiB"
        fed = feeds(rng)
        assert_same(stream.step(fed), lone.step(fed), "after the flood")


def test_unauthorised_requests_do_not_count_against_the_connection_limit():
    """--max-streams 1 allows 68 authorised connections: 100 keep-alive ones that sent a request
    without the token (401) take none of them."""
    with serving("--token", TOKEN, "--max-streams", "1") as (proc, url), sockets() as held:
        host, port = url.removeprefix("http://").split(":")
        for _ in range(100):
            held.append(socket.create_connection((host, int(port)), timeout=10))
            held[-1].sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        for sock in held:
            assert sock.recv(4096).startswith(b"HTTP/1.1 401 ")
        assert _http(url + "/v1/health") == (200, {"ok": True})
        assert _http(url + "/v1/health", token="wrong")[0] == 401


def test_headers_are_bounded():
    with serving("--token", TOKEN) as (proc, url), sockets() as held:
        host, port = url.removeprefix("http://").split(":")
        held.append(socket.create_connection((host, int(port)), timeout=10))
        with contextlib.suppress(OSError):  # the server may close before all of it is sent
            held[0].sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 100_000 + b"\r\n")
        assert held[0].recv(4096).startswith(b"HTTP/1.1 431 ")
        assert _http(url + "/v1/health") == (200, {"ok": True})


def test_too_few_open_files_is_one_line():
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))

    command = [sys.executable, "-m", "ortstate", "serve", str(MODEL), "--port", "0"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert proc.returncode == 2
    assert proc.stderr == (
        "ortstate: error: the open files limit is 512 (ulimit -n, its hard limit 512): this server needs 5440 "
        "(4160 connections, 1024 not yet authorised, 256 files); raise the hard limit or lower --max-streams\n"
    )


def test_the_open_files_limit_is_raised_to_what_the_server_needs():
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 20000))

    with serving("--max-streams", "16", preexec_fn=limit) as (proc, url):
        assert _http(url + "/v1/health", token=None) == (200, {"ok": True})
        limits = open(f"/proc/{proc.pid}/limits").read()
        assert [line.split()[3:5] for line in limits.splitlines() if line.startswith("Max open files")] == [
            ["1408", "20000"]  # 4 x 16 + 64 connections, 1024 not yet authorised, 256 files
        ]

"""Real servers on 127.0.0.1 (a free port) for the serve tests: uvicorn in a thread of the test
process or ``ortstate serve`` in a process of its own, stopped by the test; and the oracle, a lone
StatefulSession request per stream."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from oracle import REPO

import ortstate
from ortstate.errors import ServeError
from ortstate.serve import ServeConfig, serve_in_thread

MODEL = REPO / "models" / "lstm_2l_dynbatch" / "model.xml"
RTOL = ATOL = 1e-6  # a batched kernel rounds differently from batch 1 (the pool's contract)
START_TIMEOUT = 60.0


@contextlib.contextmanager
def serving(
    *args: str,
    prelude: str | None = None,
    model: Any = MODEL,
    timeout: float = START_TIMEOUT,
    then: str = "",
    **popen: Any,
) -> Iterator[tuple[subprocess.Popen, str]]:
    """``ortstate serve MODEL --port 0 ARGS`` in a process of its own (``prelude``: Python code
    that runs the command line itself, ``model``: another model or LLM folder, ``timeout``: seconds
    for its first line, ``then``: a pattern that line must go on with after the URL, ``popen``: more
    of ``subprocess.Popen``'s arguments): (the process, its URL)."""
    python = ["-m", "ortstate"] if prelude is None else ["-c", prelude]
    command = [sys.executable, *python, "serve", str(model), "--port", "0", *args]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(timeout), "the server printed nothing"
        line = proc.stdout.readline()
        match = re.search(r" on (http://127\.0\.0\.1:\d+) " + then, line)
        assert match, f"{line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
        yield proc, match.group(1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def running(slots: int = 16, **options: Any) -> Any:
    """A server in a thread of this process, small messages (64 KiB) unless asked."""
    options.setdefault("max_message_bytes", 1 << 16)
    return serve_in_thread(ServeConfig(MODEL, slots, **options))


@pytest.fixture(scope="module")
def shared() -> Iterator[Any]:
    """One server for the tests that only open their own streams."""
    with running(slots=64, max_delay=0.01) as r:
        yield r


class Lone:
    """The oracle: one StatefulSession request per stream, starting where a pool stream starts (a
    dynamic-batch IR's variables at zeros of one row)."""

    session: Any = None

    def __init__(self) -> None:
        if Lone.session is None:
            Lone.session = ortstate.StatefulSession(MODEL)
        self.request = Lone.session.create_infer_request()
        self.reset()

    def reset(self) -> None:
        self.request.reset_state()
        for var in self.request.query_state():
            var.state = np.zeros([2, 1, 16], np.float32)

    def step(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.request.infer(feeds)


def feeds(rng: np.random.Generator, time_steps: int = 1) -> dict[str, np.ndarray]:
    return {"x": rng.normal(0, 1, (1, time_steps, 8)).astype(np.float32)}


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str = "") -> None:
    assert got.keys() == want.keys(), what
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, f"{what}: {name}"
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=f"{what}: {name}")


def raw_npy(header: str, version: bytes = b"\x01\x00") -> bytes:
    """An ``.npy`` whose header dict is ``header`` as written (numpy would never write most of these)."""
    text = header.encode("latin1")
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY" + version + len(text).to_bytes(2, "little") + text


def until_both_servers_take_streams(client: Any, seconds: float = 60.0) -> None:
    """Wait until streams opened through ``client`` land on two servers: Ray's proxy learns of a
    replica a moment after Ray Serve reports it running (under load, seconds), and a stream goes to
    a replica the proxy knows. Probe streams (stepped once: a stream's server is known after its
    first step) are closed again."""
    seen, deadline = set(), time.monotonic() + seconds
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"the streams went to {seen} only, for {seconds} s"
        probes = [client.open() for _ in range(6)]
        for probe in probes:
            probe.step(feeds(np.random.default_rng(0)))
            seen.add(client.where(probe.id)["server"])
            probe.close()
        if len(seen) < 2:
            time.sleep(0.5)


def durable_streams_survive(client: Any, seed: int, lose: Any, count: int = 12) -> tuple[dict, dict]:
    """``count`` streams of ``client``'s durable servers, spread over two of them, step without pause
    while ``lose(held)`` (``held``: each stream's server) takes a server away; every stream steps at
    least 5 more times after it, every reply of every stream is a lone session's (none lost, none
    made twice) and each server's step count is its client's. Returns the streams' servers before
    and after."""
    rng = np.random.default_rng(seed)
    until_both_servers_take_streams(client)
    streams = [client.open() for _ in range(count)]
    lones = [Lone() for _ in streams]
    plans: list[list] = [[] for _ in streams]
    got: list[list] = [[] for _ in streams]

    def step(k: int) -> None:
        plans[k].append(feeds(rng))
        got[k].append(streams[k].step(plans[k][-1]))

    for k in range(count):
        step(k)
    held = {s.id: client.where(s.id)["server"] for s in streams}
    assert len(set(held.values())) == 2, "the streams did not spread over both servers"
    stop, failed = threading.Event(), []

    def drive(k: int) -> None:
        try:
            while not stop.is_set():
                step(k)
                time.sleep(0.01)
        except ServeError as exc:
            failed.append(f"stream {k}: {exc}")

    threads = [threading.Thread(target=drive, args=(k,), daemon=True) for k in range(count)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    marks = [len(g) for g in got]
    lose(held)
    deadline = time.monotonic() + 120
    while any(len(got[k]) < marks[k] + 5 for k in range(count)) and not failed:
        assert time.monotonic() < deadline, "the streams did not continue"
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(60)
    assert failed == []
    after = {s.id: client.where(s.id)["server"] for s in streams}
    for k in range(count):
        for n, outputs in enumerate(got[k]):
            assert_same(outputs, lones[k].step(plans[k][n]), f"stream {k}, step {n}")
        assert client.where(streams[k].id)["steps"] == len(got[k])
        streams[k].close()
    return held, after


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on (a server started next may take it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def process_as_it_was() -> Iterator[None]:
    """This process's SIGTERM handler and environment put back afterwards: ``ray.init`` leaves a
    handler and variables of its own behind."""
    environ, sigterm = dict(os.environ), signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, sigterm)
        os.environ.clear()
        os.environ.update(environ)


@contextlib.contextmanager
def ray_on_this_machine(prepare: Callable[[], None] | None = None) -> Iterator[str]:
    """Ray and Ray Serve's proxy on 127.0.0.1 (its URL), ``prepare()`` run first (what must be set
    before Ray starts); this process as it was afterwards (:func:`process_as_it_was`)."""
    import ray
    from ray import serve

    with process_as_it_was():
        if prepare is not None:
            prepare()
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            serve.shutdown()
            ray.shutdown()


def openai_error(
    message: str, param: str | None = None, code: str | None = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    """OpenAI's error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@contextlib.contextmanager
def sockets() -> Iterator[list[socket.socket]]:
    """A list to put sockets in, each closed at the end."""
    opened: list[socket.socket] = []
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


def openai_client(url: str, key: str = "none") -> Any:
    """The official ``openai`` client of the server at ``url`` (no retries: a test sees every error)."""
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)

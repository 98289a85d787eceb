"""Real servers on 127.0.0.1 (a free port) for the serve tests: uvicorn in a thread of the test
process, stopped by the test; and the oracle, a lone StatefulSession request per stream."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvicorn
from oracle import REPO

import ortstate
from ortstate.serve import StreamService, create_app, server

MODEL = REPO / "models" / "lstm_2l_dynbatch" / "model.xml"
START_TIMEOUT = 30.0
RTOL = ATOL = 1e-6  # a batched kernel rounds differently from batch 1 (the pool's contract)


class Running:
    """A server running in a thread: its URL and service."""

    def __init__(self, url: str, service: StreamService, uv: uvicorn.Server) -> None:
        self.url = url
        self.service = service
        self.uv = uv


@contextlib.contextmanager
def running(
    slots: int = 16,
    *,
    state_dir: Path | None = None,
    token: str | None = None,
    max_batch: int | None = None,
    max_delay: float = 0.002,
    max_message_bytes: int = 1 << 16,
    idle_park: float | None = None,
) -> Iterator[Running]:
    pool = ortstate.StreamPool(MODEL, slots, max_batch=max_batch, max_delay=max_delay)
    service = StreamService(pool, state_dir)
    app = create_app(service, token=token, max_message_bytes=max_message_bytes, idle_park=idle_park)
    sock = server.bind("127.0.0.1", 0)
    uv = uvicorn.Server(server.config(app, max_message_bytes, slots))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not uv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield Running(server.url_of(sock), service, uv)
    finally:
        uv.should_exit = True
        thread.join(15)
        sock.close()
        assert not thread.is_alive(), "the server did not stop"


@pytest.fixture(scope="module")
def shared() -> Iterator[Running]:
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

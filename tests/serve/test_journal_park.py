"""The stream server's ``--durable`` journal: a park whose record cannot be written leaves its
stream logged as before, so a step it takes before the park is undone is logged too (its step
count, and what a restart recovers, are the client's)."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from conftest import MODEL, feeds

import ortstate
from ortstate.errors import ServeError
from ortstate.serve import log as log_module
from ortstate.serve.log_format import LIVE, PARKED
from ortstate.serve.streams.journal import Journal


def test_a_step_after_a_park_that_failed_is_logged(tmp_path, monkeypatch) -> None:
    pool = ortstate.StreamPool(MODEL, slots=2)
    log = Journal(tmp_path, "one", pool)
    log.start()
    sid, name, rng = pool.open(), "s" * 22, np.random.default_rng(7)
    log.bind(name, sid)
    log.note(name, LIVE, sid)
    log.commit({sid: pool.step({sid: feeds(rng)})[sid]})
    real = log_module._write_all

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(log_module, "_write_all", full)
    log.note(name, PARKED, sid)  # the park's record, as ParkedFiles.save makes it
    with pytest.raises(ServeError, match="No space left on device"):
        log.commit({})
    monkeypatch.setattr(log_module, "_write_all", real)
    log.commit({sid: pool.step({sid: feeds(rng)})[sid]})  # a step queued before the park is undone
    assert log.steps[name] == 2 and name in log.latest
    log.close(remove=True)
